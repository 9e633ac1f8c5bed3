"""Which PyTorch `make install` asks pip for: the CPU build from PyTorch's CPU index where that index answers,
else the same pin from pip's own configuration (a machine whose pip finds a CPU wheel on its disk, as CI's).

    python3 tools/pick_torch.py torch==2.13.0
    # prints pip's arguments, e.g. `torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`

The public index resolves a bare `torch==X` to the CUDA build on Linux (gigabytes of NVIDIA libraries); the CPU
index serves the CPU build of the same version. One short probe decides, so a machine that cannot reach the CPU
index (offline, a mirror only) waits seconds at most, not pip's minutes of retries. Standard library only: this
runs before the virtual environment exists.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_SECONDS = 3.0  # the longest a machine without the index waits before pip's configuration is used


def index_answers(index: str, timeout: float = PROBE_SECONDS) -> bool:
    """True when `index`'s page for torch answers 200 within `timeout` seconds (no retries)."""
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout) as reply:
            return reply.status == 200
    except (OSError, ValueError):  # URLError, a refused or timed-out connection, a malformed URL
        return False


def pip_args(spec: str, index: str, timeout: float = PROBE_SECONDS) -> tuple[list[str], str]:
    """pip install's arguments for `spec`, and one line saying which build they take and why."""
    if index and index_answers(index, timeout):
        return [spec, "--index-url", index], f"installing {spec}, the CPU build, from {index}"
    return [spec], (
        f"{index or 'no CPU index'} did not answer within {timeout:g} s: installing {spec} from pip's own "
        "configuration (a local CPU wheel where the machine has one; from the public index on Linux this is "
        "the CUDA build: `make install TORCH=...` names another)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("spec", help="the pin, e.g. torch==2.13.0")
    p.add_argument("--index", default=CPU_INDEX, help=f"the CPU index to probe (default: {CPU_INDEX}; '' skips it)")
    p.add_argument(
        "--timeout", type=float, default=PROBE_SECONDS, help="seconds the probe waits (default: %(default)s)"
    )
    args = p.parse_args(argv)
    chosen, why = pip_args(args.spec, args.index, args.timeout)
    print(f"pick_torch: {why}", file=sys.stderr)
    print(" ".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
