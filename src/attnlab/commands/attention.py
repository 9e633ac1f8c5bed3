"""`attnlab attention`: translate one sentence and save its attention heatmaps, tokens on the axes.

    attnlab attention --checkpoint runs/demo/transformer "i'm home ." --out maps/

Transformer: encoder self-attention, decoder self-attention and encoder–decoder attention, each a
layer x head grid. Bahdanau: the decoder's additive attention over the source.
Rows (queries) of decoder maps are labelled with the token each step *produced*.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.commands.translate import add_checkpoint_args, open_translator


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("attention", help="save attention heatmaps of one translation",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentence", help="an English sentence, e.g. \"i'm home .\"")
    add_checkpoint_args(p)
    p.add_argument("--out", metavar="DIR", help="output folder (default: <checkpoint>/attention)")
    p.add_argument("--format", nargs="+", default=["png", "svg"], choices=["png", "svg", "pdf"])
    p.add_argument("--truncate", action="store_true", help="cut a sentence longer than the model's max_len")
    p.set_defaults(func=run)


def attention_figures(translator, sentence: str, truncate: bool = False):
    """Translate `sentence` and draw its attention: (Explanation, [(name, Figure), ...]).

    Transformer: encoder self-, decoder self- and encoder–decoder attention as layer x head grids;
    Bahdanau: the decoder's additive attention over the source. Used by this command and the demo.
    """
    from attnlab.explain import explain
    from attnlab.viz import show_heatmaps

    exp = explain(translator, sentence, truncate=truncate)
    src, produced, dec_in = exp.src_tokens, exp.tgt_tokens, exp.tgt_input_tokens
    panels = [("encoder_self_attention", exp.encoder_self, src, src, "source keys", "source queries"),
              ("decoder_self_attention", exp.decoder_self, dec_in, produced, "decoder keys", "output queries"),
              ("encoder_decoder_attention", exp.cross, src, produced, "source keys", "output queries")]
    bahdanau = exp.encoder_self.numel() == 0
    figures = []
    for name, w, xt, yt, xl, yl in panels:
        if w.numel() == 0:
            continue  # Bahdanau has no self-attention
        L, H = w.shape[:2]
        if bahdanau:
            fig = show_heatmaps(w, xl, yl, figsize=(4, 4), xticklabels=xt, yticklabels=yt)
            name = "decoder_attention"
        else:
            fig = show_heatmaps(w, xl, yl, titles=[f"head {h + 1}" for h in range(H)], figsize=(2.8, 2.8),
                                xticklabels=xt, yticklabels=yt, row_labels=[f"layer {i + 1}" for i in range(L)])
        figures.append((name, fig))
    return exp, figures


def run(args) -> int:
    from attnlab.viz import save_figure

    translator = open_translator(args)
    result, figures = attention_figures(translator, args.sentence, args.truncate)
    out_dir = Path(args.out) if args.out else Path(args.checkpoint) / "attention"
    print(f"{args.sentence} => {result.translation}")
    for name, fig in figures:
        for path in save_figure(fig, out_dir / name, formats=args.format):
            print(f"saved {path}")
    return 0
