"""`attnlab positional-encoding`: plots, the binary-counting analogy and the rotation check.

Plot the sinusoidal encoding and verify numerically that a shift by k positions is one fixed
rotation M_k for every position.
"""

from __future__ import annotations

import argparse

from attnlab.commands._common import add_figures_command, claim_figures, save_figures

# The rotation identity is exact math; float32 encodings reproduce it to about 1e-6.
TOLERANCE = 1e-5


def add_parser(subparsers) -> None:
    help = "sinusoidal positional encoding: plots, binary analogy, PE(pos+k) = M_k PE(pos) check"
    p = add_figures_command(subparsers, "positional-encoding", help, __doc__)
    p.add_argument("--num-hiddens", type=int, default=32, help="encoding size D (even, 2..1024)")
    p.add_argument("--num-steps", type=int, default=60, help="positions to encode (2..1000)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnlab.chapter.report import format_table
    from attnlab.chapter.self_attention import positional_encoding
    from attnlab.utils.checks import check_range

    # The rotation check compares every shift with every position: O(L^2 D); the bounds keep it to seconds.
    check_range("--num-hiddens", args.num_hiddens, 2, 1024, integer=True)
    if args.num_hiddens % 2:
        raise ValueError(f"--num-hiddens must be even (sine and cosine pairs), got {args.num_hiddens}")
    check_range("--num-steps", args.num_steps, 2, 1000, integer=True)
    claim = claim_figures(args)  # before any work: the folder is new or earlier figures (--force)
    result = positional_encoding(args.num_hiddens, args.num_steps)
    binary, checks = result.tables
    print("Binary counting vs encoding columns (higher bit / higher column = lower frequency):")
    print(format_table(*binary))
    print()
    print(format_table(*checks))
    err = result.data["rotation_max_error"]
    print(
        f"\nmax |PE(pos+k) - M_k PE(pos)| over all k, pos: {err:.2e} "
        f"({'OK' if err <= TOLERANCE else 'FAILED'}, tolerance {TOLERANCE:g})"
    )
    save_figures(result, claim)
    return 0 if err <= TOLERANCE else 1
