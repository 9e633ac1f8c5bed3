"""`attnlab scaling`: why scaled dot-product attention divides by sqrt(d_k).

Monte-Carlo over q, k ~ N(0, I) for d_k in 8, 32, 64, 128, 512.
"""

from __future__ import annotations

import argparse

from attnlab.commands._common import add_figures_command, claim_figures, save_figures


def add_parser(subparsers) -> None:
    help = "variance, softmax saturation and gradient size of q.k with and without 1/sqrt(d_k)"
    p = add_figures_command(subparsers, "scaling", help, __doc__)
    p.add_argument("--samples", type=int, default=1000, help="queries per d_k (1..100000)")
    p.add_argument("--num-keys", type=int, default=64, help="keys per query (2..4096)")
    p.add_argument("--seed", type=int, default=0, help="0..2**32-1 (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnlab.chapter.report import format_table
    from attnlab.chapter.scoring_functions import scaling
    from attnlab.utils.checks import check_range, check_seed

    # The scores of every sample are kept for the histograms: samples x num_keys float64 per d_k.
    check_range("--samples", args.samples, 1, 100_000, integer=True)
    check_range("--num-keys", args.num_keys, 2, 4096, integer=True)
    check_seed(args.seed)
    claim = claim_figures(args)  # before any work: the folder is new or earlier figures (--force)
    result = scaling(samples=args.samples, num_keys=args.num_keys, seed=args.seed)
    for headers, rows in result.tables:
        print(format_table(headers, rows))
    save_figures(result, claim)
    return 0
