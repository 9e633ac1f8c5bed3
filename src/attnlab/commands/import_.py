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
    add_force(p, "an earlier run in --out")
    p.set_defaults(func=run)


def run(args) -> int:
    from attnlab.export.marian import import_hf

    out = import_hf(args.source, args.out, force=args.force)
    print(f'imported {args.source} -> {out}; try: attnlab translate --checkpoint {out} "Hello."')
    return 0
