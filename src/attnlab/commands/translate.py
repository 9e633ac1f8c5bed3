"""`attnlab translate`: English sentences (arguments, or stdin one a line) -> French, one a line.

attnlab translate "i'm home ." "he's calm ."
echo "go ." | attnlab translate --checkpoint runs/d2l --beam 4
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab.commands._common import add_command
from attnlab.runs.layout import DEFAULT_RUN

MAX_BEAM = 16  # beams x output length is memory: 16 is far past where BLEU stops improving


def add_checkpoint_args(p, default=DEFAULT_RUN) -> None:
    """--checkpoint / --weights / --device, shared by translate, evaluate and attention."""
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=str(default),
        help=f"run folder written by `attnlab train` or `attnlab demo` (default: {default})",
    )
    p.add_argument(
        "--weights", metavar="FILE", help="other weights for that run: a checkpoint folder or an averaged .safetensors"
    )
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1 ...")
    add_precision_arg(p)


def add_precision_arg(p) -> None:
    """--precision, shared by translate, evaluate, attention and serve (see attnlab.utils.precision)."""
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "int8"],
        default="fp32",
        help="fp32 (default: the same output on every machine), bf16, int8 (CPU, Transformer), or auto: the "
        "fastest this hardware computes natively and measured to pay (attnlab.utils.precision)",
    )


def open_translator(args):
    """load_translator with a hint on how to make the missing default run."""
    from attnlab.runs.loading import load_translator

    run_dir = Path(args.checkpoint)
    if not run_dir.exists():
        raise FileNotFoundError(
            f"no trained model at {run_dir}; make one with `attnlab demo` (writes {DEFAULT_RUN}) or "
            f"`attnlab train --model transformer --preset d2l --out {run_dir}`"
        )
    translator = load_translator(
        run_dir, device=args.device, weights=args.weights, precision=getattr(args, "precision", "fp32")
    )
    if translator.precision.asked == "auto":  # say what `auto` chose on this machine, and why
        print(f"attnlab: --precision {translator.precision.reason}", file=sys.stderr)
    return translator


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "translate", "translate English sentences with a trained model", __doc__)
    p.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate (default: stdin)")
    add_checkpoint_args(p)
    p.add_argument("--beam", type=int, default=1, help=f"beam size 1..{MAX_BEAM} (1 = greedy, the default)")
    p.add_argument("--truncate", action="store_true", help="cut sentences longer than the model's max_len")
    p.set_defaults(func=run)


def _utf8(raw: list[bytes], where: str) -> list[str]:
    """Decode each line as UTF-8; bytes that are not UTF-8 become U+FFFD, with one warning naming the
    lines (a stray Latin-1 byte should not stop a whole file from being translated)."""
    lines, bad = [], []
    for i, line in enumerate(raw, start=1):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(line.decode("utf-8", errors="replace"))
            bad.append(i)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        print(
            f"attnlab translate: {where}{'' if len(bad) == 1 else 's'} {shown} {'is' if len(bad) == 1 else 'are'} "
            f"not valid UTF-8; their undecodable bytes were replaced by U+FFFD (convert the input to UTF-8, "
            f"e.g. iconv -f latin1 -t utf-8)",
            file=sys.stderr,
        )
    return lines


def _stdin_lines() -> list[str]:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return _utf8(buffer.read().splitlines(), "stdin line")
    # A text stream without bytes underneath: undecodable input reaches it as lone surrogates.
    return _utf8([line.rstrip("\n").encode("utf-8", "surrogateescape") for line in sys.stdin], "stdin line")


def run(args) -> int:
    from attnlab.utils.checks import check_range

    check_range("--beam", args.beam, 1, MAX_BEAM, integer=True)
    translator = open_translator(args)
    if args.sentences:
        # Arguments that are not UTF-8 reach Python as lone surrogates (surrogateescape).
        sentences = _utf8([s.encode("utf-8", "surrogateescape") for s in args.sentences], "argument")
        for line in translator.translate(sentences, beam=args.beam, truncate=args.truncate):
            print(line)
        return 0
    # stdin: one output line per input line (blank in -> blank out), so outputs stay aligned.
    lines = _stdin_lines()
    todo = [i for i, line in enumerate(lines) if line.strip()]
    out = [""] * len(lines)
    if todo:
        for i, text in zip(
            todo, translator.translate([lines[i] for i in todo], beam=args.beam, truncate=args.truncate)
        ):
            out[i] = text
    for text in out:
        print(text)
    return 0
