"""`python -m attnlab ...` (what `torchrun -m attnlab train ...` runs)."""

from attnlab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
