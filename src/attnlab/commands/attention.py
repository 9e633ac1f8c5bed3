"""`attnlab attention`: translate one sentence and save its attention heatmaps, tokens on the axes.

    attnlab attention --checkpoint runs/demo/transformer "i'm home ." --out maps/

Transformer: encoder self-attention, decoder self-attention and encoder–decoder attention, each a
layer x head grid. Bahdanau: the decoder's additive attention over the source.
Rows (queries) of decoder maps are labelled with the token each step *produced*.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.commands._common import add_command, add_force
from attnlab.commands.translate import add_checkpoint_args, open_translator


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "attention", "save attention heatmaps of one translation", __doc__)
    p.add_argument("sentence", help="a sentence in the run's source language, e.g. \"i'm home .\"")
    add_checkpoint_args(p)
    p.add_argument("--out", metavar="DIR", help="output folder (default: <checkpoint>/attention)")
    p.add_argument(
        "--format",
        nargs="+",
        default=["png", "svg"],
        choices=["png", "svg", "pdf"],
        help="figure formats (default: png svg)",
    )
    p.add_argument("--truncate", action="store_true", help="cut a sentence longer than the model's max_len")
    add_force(p, "earlier attention figures in --out")
    p.set_defaults(func=run)


def run(args) -> int:
    from attnlab.analysis.explanation import explain
    from attnlab.runs.outputs import claim_output, write_output
    from attnlab.viz.files import save_figure
    from attnlab.viz.heatmaps import attention_figures

    out_dir = Path(args.out) if args.out else Path(args.checkpoint) / "attention"
    claim = claim_output(out_dir, "attention", force=args.force)
    translator = open_translator(args)
    result = explain(translator, args.sentence, truncate=args.truncate)
    print(f"{args.sentence} => {result.translation}")
    with write_output(claim, {"sentence": args.sentence}) as tmp:
        names = [p.name for name, fig in attention_figures(result) for p in save_figure(fig, tmp / name, args.format)]
    for name in names:
        print(f"saved {claim.path / name}")
    return 0
