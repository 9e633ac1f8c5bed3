"""`attnlab params`: parameter counts of attention, the FFN and the whole Transformer; the KV cache per
token of multi-head, grouped-query and multi-query attention; complexity.

Counts come from instantiating the modules on the meta device (no memory).
"""

from __future__ import annotations

import argparse

from attnlab.commands._common import add_command


def add_parser(subparsers) -> None:
    help = "parameter counts (single vs multi-head, FFN, base/big Transformer) and complexity table"
    p = add_command(subparsers, "params", help, __doc__)
    p.add_argument("--num-hiddens", type=int, default=512, help="d for the attention/FFN tables")
    p.add_argument("--num-heads", type=int, default=8, help="heads (must divide --num-hiddens)")
    p.add_argument("--ffn-num-hiddens", type=int, default=2048, help="FFN hidden size")
    p.add_argument(
        "--num-kv-heads",
        type=int,
        default=None,
        help="key/value heads of a grouped-query row (must divide --num-heads; default: no such row)",
    )
    p.add_argument(
        "--num-layers", type=int, default=6, help="decoder layers in the KV-cache table (the encoder caches nothing)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from attnlab.chapter.parameters import params
    from attnlab.chapter.report import format_table
    from attnlab.utils.checks import check_range

    # Counts come from meta tensors (no memory), but torch still refuses sizes whose byte count overflows.
    for flag, v in (
        ("--num-hiddens", args.num_hiddens),
        ("--num-heads", args.num_heads),
        ("--ffn-num-hiddens", args.ffn_num_hiddens),
        ("--num-layers", args.num_layers),
    ):
        check_range(flag, v, 1, 1_000_000, integer=True)
    if args.num_hiddens % args.num_heads:
        raise ValueError(f"--num-heads ({args.num_heads}) must divide --num-hiddens ({args.num_hiddens})")
    kv = args.num_kv_heads
    if kv is not None and (kv < 1 or kv > args.num_heads or args.num_heads % kv):
        raise ValueError(f"--num-kv-heads ({kv}) must divide --num-heads ({args.num_heads}) (1 = multi-query)")
    result = params(args.num_hiddens, args.num_heads, args.ffn_num_hiddens, kv, args.num_layers)
    for headers, rows in result.tables:
        print(format_table(headers, rows))
        print()
    print(result.paragraph)
    return 0
