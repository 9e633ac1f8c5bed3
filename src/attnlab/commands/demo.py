"""`attnlab demo`: the attention chapter end to end, written up in one report.

    attnlab demo                       # 9 minutes at most on 2 CPU cores, busy or not; writes runs/demo/report.html
    attnlab demo --budget 900          # more time for the translators on a slow or busy machine
    attnlab demo --scale tiny          # seconds: the same steps with tiny models (what the tests run)

Steps: kernel regression, positional encoding, scaling, parameter counts; then the Bahdanau and the
Transformer translators trained on the English–French pairs, their translations of the book's four
sentences with BLEU, their attention maps, the Transformer's test-set BLEU and time-to-quality curve
(its checkpoints scored on validation, drawn over the curves benchmarks/quality/time_to_quality.py measured,
which attnlab ships); the trained Transformer is saved where `attnlab translate` and `attnlab serve` look by default.
The whole run keeps to --budget: each translator trains for its share of the time left, on the threads free
when it starts, and the report says per stage what it got beside the figures of a quiet machine.
"""

from __future__ import annotations

import os

from attnlab.commands._common import add_command, add_force


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "demo", "run the whole chapter and write runs/demo/report.html", __doc__)
    p.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    p.add_argument("--data", metavar="PATH", help="fra-eng.zip / .txt / .tsv (default: $ATTNLAB_DATA, cache, download)")
    p.add_argument(
        "--scale",
        choices=("full", "tiny"),  # attnlab.chapter.demo.SCALES (not imported here: --help stays light)
        default="full",
        help="full (the default) or tiny (seconds, for tests)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=540.0,  # attnlab.chapter.budget.DEFAULT_BUDGET (not imported here: --help stays light)
        metavar="SECONDS",
        help="seconds for the whole demo, shared out among its stages (default: 540)",
    )
    p.add_argument("--seed", type=int, default=0, help="one seed for every generator (0..2**32-1; default 0)")
    add_force(p, "an earlier demo in --out (only if it holds nothing else)")
    p.set_defaults(func=run)


def run(args) -> int:
    from attnlab.chapter.demo import run_demo

    try:
        run_demo(args.out, data=args.data, scale=args.scale, seed=args.seed, force=args.force, budget=args.budget)
    except ValueError as exc:
        raise ValueError(for_make(str(exc))) from exc
    return 0


def for_make(message: str) -> str:
    """`message` in a make user's words when `make demo` ran this (make sets MAKELEVEL for its recipes): the
    flags go through DEMO_FLAGS."""
    if "MAKELEVEL" not in os.environ:
        return message
    return message.replace("pass --force", "run `make demo DEMO_FLAGS=--force`")
