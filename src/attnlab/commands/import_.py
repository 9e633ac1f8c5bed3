"""`attnlab import hf SOURCE --out DIR`: a Hugging Face Marian (OPUS-MT) model saved on disk -> an attnlab
run folder that translate, evaluate, attention and serve use as they are.

    huggingface-cli download Helsinki-NLP/opus-mt-en-fr --local-dir models/opus-mt-en-fr
    attnlab import hf models/opus-mt-en-fr --out runs/opus-mt-en-fr
    attnlab serve --checkpoint runs/opus-mt-en-fr
"""

from __future__ import annotations

from attnlab.commands._common import add_command, add_force

FORMATS = ("hf",)


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "import", "import a Hugging Face Marian (OPUS-MT) model as a run folder", __doc__)
    p.add_argument("format", choices=FORMATS, help="hf: a folder saved by MarianMTModel.save_pretrained")
    p.add_argument("source", metavar="SOURCE", help="local folder with config.json, weights and tokenizer files")
    p.add_argument("--out", required=True, metavar="DIR", help="run folder to write (a new one)")
    add_force(p, "an earlier import in --out (never a run attnlab trained)")
    p.set_defaults(func=run)


def check_replaced(out: str) -> None:
    """--force replaces an earlier import only: a run attnlab trained (its weights, its checkpoints) is
    refused in one line, before any work."""
    from pathlib import Path

    from attnlab.runs.layout import CHECKPOINTS, CONFIG_FILE
    from attnlab.runs.outputs import output_kind
    from attnlab.utils.files import read_json

    path = Path(out)
    if output_kind(path) != "run":
        return  # new, or not a run: the output guard decides
    try:
        cfg = read_json(path / CONFIG_FILE)
    except (OSError, ValueError):
        cfg = {}
    data = cfg.get("data") if isinstance(cfg, dict) else None
    if isinstance(data, dict) and data.get("source") == "hf":
        return
    ckpts = path / CHECKPOINTS
    n = sum(1 for p in ckpts.iterdir() if p.is_dir()) if ckpts.is_dir() else 0
    held = f" with {n} checkpoint{'s' if n != 1 else ''}" if n else ""
    raise ValueError(
        f"--out {out} holds a run attnlab trained{held}; import hf --force replaces only an earlier import. "
        "Choose another --out (or delete that run yourself if you mean to)"
    )


def run(args) -> int:
    from attnlab.export.marian import import_hf

    if args.force:
        check_replaced(args.out)
    out = import_hf(args.source, args.out, force=args.force)
    print(f'imported {args.source} -> {out}; try: attnlab translate --checkpoint {out} "Hello."')
    return 0
