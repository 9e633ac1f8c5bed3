"""`attnlab average`: average the weights of a run's last K checkpoints (as fairseq / OpenNMT do).

    attnlab average --checkpoint runs/demo/transformer --last 5
    attnlab translate --checkpoint runs/demo/transformer \
        --weights runs/demo/transformer/averaged_last5.safetensors "go ."
"""

from __future__ import annotations

from pathlib import Path

from attnlab.commands._common import add_command, add_force


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "average", "average the last K checkpoints of a run", __doc__)
    p.add_argument("--checkpoint", metavar="DIR", required=True, help="run folder")
    p.add_argument("--last", type=int, default=5, metavar="K", help="how many of the newest checkpoints (default 5)")
    p.add_argument("--out", metavar="FILE", help="output .safetensors (default: DIR/averaged_lastK.safetensors)")
    add_force(p, "earlier averaged weights in --out")
    p.set_defaults(func=run)


def run(args) -> int:
    from attnlab.runs.checkpoints import average_checkpoints, list_checkpoints, save_tensors
    from attnlab.runs.outputs import OUTPUT_METADATA, claim_output_file, write_output_file
    from attnlab.utils.checks import check_range

    check_range("--last", args.last, 1, integer=True, none_ok=True)
    run_dir = Path(args.checkpoint)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    ckpts = list_checkpoints(run_dir)
    if len(ckpts) < args.last:
        raise ValueError(
            f"{run_dir} has {len(ckpts)} checkpoint(s) but --last {args.last} asks for more; "
            f"train with a smaller --checkpoint-every or a larger --keep-last"
        )
    chosen = ckpts[-args.last :]
    out = Path(args.out) if args.out else run_dir / f"averaged_last{args.last}.safetensors"
    claim = claim_output_file(out, "averaged", force=args.force)  # before reading any checkpoint
    averaged = average_checkpoints(chosen)
    with write_output_file(claim) as tmp:
        save_tensors(
            averaged, tmp, metadata={"averaged": ",".join(p.name for p in chosen), OUTPUT_METADATA: "averaged"}
        )
    print(f"averaged {len(chosen)} checkpoints ({', '.join(p.name for p in chosen)})")
    print(f"saved to {out}; use it with --weights {out}")
    return 0
