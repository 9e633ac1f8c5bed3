"""`attnlab attention`: translate one sentence and save its attention heatmaps, tokens on the axes.

    attnlab attention --checkpoint runs/demo/transformer "i'm home ." --out maps/
    attnlab attention --checkpoint runs/vit --image 3      # test image 3: rollout + class-token maps

Transformer: encoder self-attention, decoder self-attention and encoder–decoder attention, each a
layer x head grid. Bahdanau: the decoder's additive attention over the source.
Rows (queries) of decoder maps are labelled with the token each step *produced*.
Vision Transformer (`--image N`, an index into the run's test split): attention rollout and the class
token's attention over the patches, per layer and head, drawn on the image.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.commands._common import add_checkpoint_args, add_command, add_force, run_model_type


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "attention", "save attention heatmaps of one translation", __doc__)
    p.add_argument(
        "sentence", nargs="?", help="a sentence in the run's source language, e.g. \"i'm home .\" (translators)"
    )
    p.add_argument(
        "--image", type=int, metavar="N", help="a Vision Transformer run: image N of its test split (default: none)"
    )
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
    from attnlab.runs.loading import open_translator
    from attnlab.runs.outputs import claim_output, write_output
    from attnlab.viz.files import save_figure
    from attnlab.viz.heatmaps import attention_figures

    out_dir = Path(args.out) if args.out else Path(args.checkpoint) / "attention"
    if _is_image_run(args):
        return _image(args, out_dir)
    if args.sentence is None:
        raise ValueError('attention needs a sentence to translate, e.g. attnlab attention "i\'m home ."')
    if args.image is not None:
        raise ValueError(f"--image is for Vision Transformer runs; {args.checkpoint} is a translator: pass a sentence")
    claim = claim_output(out_dir, "attention", force=args.force)
    translator = open_translator(args.checkpoint, args.device, args.weights, args.precision)
    result = explain(translator, args.sentence, truncate=args.truncate)
    print(f"{args.sentence} => {result.translation}")
    with write_output(claim, {"sentence": args.sentence}) as tmp:
        names = [p.name for name, fig in attention_figures(result) for p in save_figure(fig, tmp / name, args.format)]
    for name in names:
        print(f"saved {claim.path / name}")
    return 0


def _is_image_run(args) -> bool:
    from attnlab.training.tasks import IMAGES, task_for

    model_type = run_model_type(args.checkpoint)
    return model_type is not None and task_for(model_type) is IMAGES


def _image(args, out_dir: Path) -> int:
    """A ViT run: rollout and class-token maps of test image N."""
    import torch

    from attnlab.analysis.rollout import explain_image
    from attnlab.runs.loading import load_model
    from attnlab.runs.outputs import claim_output, write_output
    from attnlab.training.tasks import run_images
    from attnlab.viz.files import save_figure
    from attnlab.viz.images import image_attention_figures

    if args.sentence is not None or args.image is None:
        raise ValueError(f"{args.checkpoint} is a Vision Transformer run: pass --image N (a test image), no sentence")
    claim = claim_output(out_dir, "attention", force=args.force)
    model, cfg = load_model(args.checkpoint, args.device)
    test = run_images(args.checkpoint, cfg).test
    if not 0 <= args.image < len(test):
        raise ValueError(f"--image must be between 0 and {len(test) - 1} (the test split's images), got {args.image}")
    exp = explain_image(model, torch.from_numpy(test.images[args.image]))
    classes = cfg["data"].get("classes")
    name = classes[exp.label] if classes else exp.label
    truth = classes[test.labels[args.image]] if classes else test.labels[args.image]
    print(f"test image {args.image}: predicted {name} ({float(exp.probs[exp.label]):.1%}), label {truth}")
    with write_output(claim, {"image": args.image}) as tmp:
        figures = image_attention_figures(exp, classes)
        names = [p.name for name, fig in figures for p in save_figure(fig, tmp / name, args.format)]
    for n in names:
        print(f"saved {claim.path / n}")
    return 0
