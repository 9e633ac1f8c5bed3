"""`attnlab attention`: translate one sentence and save its attention heatmaps, tokens on the axes.

    attnlab attention --checkpoint runs/demo/transformer "i'm home ." --out maps/

Transformer: encoder self-attention, decoder self-attention and encoder–decoder attention, each a
layer x head grid. Bahdanau: the decoder's additive attention over the source.
Rows (queries) of decoder maps are labelled with the token each step *produced*.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

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


def attention_maps(translator, sentence: str, truncate: bool = False):
    """Translate `sentence` greedily, then re-run it teacher-forced while recording attention.

    Returns (translation, {module name: (B=1, H, Lq, Lk) weights}, input tokens): re-running the
    model on its own output gives exactly the weights greedy decoding used, in one forward pass.
    """
    from attnlab.attention import record_attention
    from attnlab.decode import attention_maps as stitch

    result = translator.translate_tokens([sentence], truncate=truncate)[0]
    src_vocab, tgt_vocab, model = translator.src_vocab, translator.tgt_vocab, translator.model
    src = torch.tensor([src_vocab.to_indices(result.src_tokens)], device=translator.device)
    tgt_in = torch.tensor([[tgt_vocab.bos] + tgt_vocab.to_indices(result.tgt_tokens)], device=translator.device)
    lens = torch.tensor([src.shape[1]], device=translator.device)
    model.eval()
    with torch.no_grad(), record_attention(model) as rec:
        model(src, tgt_in, lens)
    return result, stitch(rec)


def _grid(maps: dict, prefix: str, suffix: str) -> torch.Tensor:
    """Stack per-layer (1, H, Lq, Lk) maps named prefix.{i}.suffix into (layers, H, Lq, Lk)."""
    names = sorted((n for n in maps if n.startswith(prefix) and n.endswith(suffix)),
                   key=lambda n: int(n[len(prefix):].split(".")[0]))
    return torch.cat([maps[n] for n in names], dim=0)


def attention_figures(translator, sentence: str, truncate: bool = False):
    """Translate `sentence` and draw its attention: (translation, [(name, Figure), ...]).

    Transformer: encoder self-, decoder self- and encoder–decoder attention as layer x head grids;
    Bahdanau: the decoder's additive attention over the source. Used by this command and the demo.
    """
    from attnlab.viz import show_heatmaps

    result, maps = attention_maps(translator, sentence, truncate)
    src_tokens = result.src_tokens
    produced = result.tgt_tokens + ["<eos>"]            # what each decoder query predicted
    dec_inputs = ["<bos>"] + result.tgt_tokens          # the decoder's own keys
    model_type = translator.config.get("model_type", type(translator.model).__name__.lower())
    figures = []
    if model_type == "transformer":
        panels = [("encoder_self_attention", _grid(maps, "encoder.blocks.", ".attention"), src_tokens, src_tokens,
                   "source keys", "source queries"),
                  ("decoder_self_attention", _grid(maps, "decoder.blocks.", ".self_attention"), dec_inputs,
                   produced, "decoder keys", "output queries"),
                  ("encoder_decoder_attention", _grid(maps, "decoder.blocks.", ".cross_attention"), src_tokens,
                   produced, "source keys", "output queries")]
        for name, w, xt, yt, xl, yl in panels:
            L, H = w.shape[:2]
            fig = show_heatmaps(w, xl, yl, titles=[f"head {h + 1}" for h in range(H)], figsize=(2.8, 2.8),
                                xticklabels=xt, yticklabels=yt, row_labels=[f"layer {i + 1}" for i in range(L)])
            figures.append((name, fig))
    else:
        (w,) = maps.values()  # the decoder's one additive attention, (1, 1, T, S)
        fig = show_heatmaps(w, "source keys", "output queries", figsize=(4, 4), xticklabels=src_tokens,
                            yticklabels=produced)
        figures.append(("decoder_attention", fig))
    return result, figures


def run(args) -> int:
    from attnlab.viz import save_figure

    translator = open_translator(args)
    result, figures = attention_figures(translator, args.sentence, args.truncate)
    out_dir = Path(args.out) if args.out else Path(args.checkpoint) / "attention"
    print(f"{args.sentence} => {result.text}")
    for name, fig in figures:
        for path in save_figure(fig, out_dir / name, formats=args.format):
            print(f"saved {path}")
    return 0
