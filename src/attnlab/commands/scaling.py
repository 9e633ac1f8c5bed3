"""`attnlab scaling`: why scaled dot-product attention divides by sqrt(d_k)."""

from __future__ import annotations

import argparse

from attnlab.report import format_table, prepare_output_dir


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "scaling",
        help="variance, softmax saturation and gradient size of q.k with and without 1/sqrt(d_k)",
        description="Monte-Carlo over q, k ~ N(0, I) for d_k in 8, 32, 64, 128, 512.",
    )
    p.add_argument("--out", default="runs/scaling", help="folder for PNG+SVG figures")
    p.add_argument("--samples", type=int, default=1000, help="queries per d_k (>= 1)")
    p.add_argument("--num-keys", type=int, default=64, help="keys per query (>= 2)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnlab import chapter

    if args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    if args.num_keys < 2:
        raise ValueError(f"--num-keys must be >= 2, got {args.num_keys}")
    out = prepare_output_dir(args.out)
    result = chapter.scaling(samples=args.samples, num_keys=args.num_keys, seed=args.seed)
    for headers, rows in result.tables:
        print(format_table(headers, rows))
    section = result.save(out)
    print(f"\n{result.paragraph}\n")
    print(f"figures (PNG + SVG) in {out}: {', '.join(p.stem for p in section.figures)}")
    return 0
