"""`attnlab translate`: source sentences (arguments, or stdin one a line) -> their translations, one a line.

attnlab translate "i'm home ." "he's calm ."
echo "go ." | attnlab translate --checkpoint runs/d2l --beam 1        # greedy (default: beam 4)
attnlab translate --beam 5 --n-best 3 "i'm home ."        # 0 ||| je suis chez moi . ||| -0.1234
attnlab translate --sample --top-p 0.9 --n-best 4 --seed 1 "i'm home ."
attnlab translate --beam 5 --constraint "à la maison" --align "i'm home ."

With --n-best, each hypothesis is a line SOURCE_INDEX ||| translation ||| score (0-based index of the
input sentence; an empty input line gets one row with an empty translation and score nan); --align
appends ||| i-j ... (source word i, target word j, 0-based, whitespace words).

Lines are written in input order as soon as they and every line before them are done (the input is
decoded in windows of a few batches), flushed: `| head -1` ends quietly, and a stopped run (Ctrl-C,
SIGTERM) keeps every finished line on stdout or in --out.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from pathlib import Path

from attnlab.commands._common import add_command
from attnlab.decoding.options import DEFAULT_BEAM, MAX_BEAM
from attnlab.runs.layout import DEFAULT_RUN


def add_checkpoint_args(p, default=DEFAULT_RUN) -> None:
    """--checkpoint / --weights / --device, shared by translate, evaluate and attention."""
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=str(default),
        help=f"run folder written by `attnlab train` or `attnlab demo` (default: {default})",
    )
    p.add_argument(
        "--weights",
        metavar="FILE",
        help="other weights for that run: a checkpoint folder or an averaged .safetensors (default: the run's "
        "model.safetensors)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu (default: a trained run decodes a few sentences fastest where it loads; train's default is "
        "auto, since training is where a GPU pays), cuda, cuda:1 ...",
    )
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
    p = add_command(subparsers, "translate", "translate sentences with a trained model", __doc__)
    p.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate (default: stdin)")
    add_checkpoint_args(p)
    p.add_argument(
        "--beam",
        type=int,
        default=None,
        help=f"beam size 1..{MAX_BEAM} (default {DEFAULT_BEAM}, as evaluate: +2.5 BLEU over greedy at ~3x the time; "
        f"1 = greedy, the quickest answer; --sample takes no beam)",
    )
    p.add_argument("--truncate", action="store_true", help="cut sentences longer than the model's max_len")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the translations to FILE, a new file (never one that exists), line by line as they finish "
        "(default: stdout)",
    )
    g = p.add_argument_group("decoding options (attnlab.decoding.DecodeOptions)")
    g.add_argument(
        "--n-best",
        type=int,
        default=None,
        metavar="N",
        help="print N hypotheses per sentence (<= --beam; with --sample, N samples) as INDEX ||| text ||| score "
        "(default: the best one, plain)",
    )
    g.add_argument(
        "--sample", action="store_true", help="sample tokens instead of searching (see --temperature/--top-k/--top-p)"
    )
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature > 0 (default 1)")
    g.add_argument("--top-k", type=int, default=0, help="sample among the k likeliest tokens (default 0: all)")
    g.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        help="nucleus sampling: the likeliest tokens holding this probability, (0, 1]",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed for --sample (same seed and input: same samples; default: a fresh draw each run)",
    )
    g.add_argument(
        "--length-penalty", type=float, default=1.0, help="scores are log-prob / length ** this (0..5, default 1)"
    )
    g.add_argument("--min-len", type=int, default=0, help="no <eos> before this many output tokens")
    g.add_argument(
        "--max-len", type=int, default=None, help="most output tokens, <eos> included (default: 2 x source + 10)"
    )
    g.add_argument("--no-repeat-ngram", type=int, default=0, metavar="N", help="no n-gram of size N twice in an output")
    g.add_argument(
        "--prefix",
        metavar="TEXT",
        help="target words every translation starts with (decoding continues after them; default: none)",
    )
    g.add_argument(
        "--constraint",
        action="append",
        default=[],
        metavar="PHRASE",
        help="a target phrase every translation must contain (repeatable; constrained beam search; default: none)",
    )
    g.add_argument("--align", action="store_true", help="append ||| i-j word alignments from cross-attention")
    g.add_argument(
        "--align-layer",
        type=int,
        default=None,
        help="decoder layer for --align (default: the run's alignment.json from `attnlab heads`, else last but one)",
    )
    g.add_argument(
        "--align-heads",
        default=None,
        metavar="H,H",
        help="heads averaged for --align, e.g. 0,2 (default: the run's alignment.json, else all of the layer)",
    )
    p.set_defaults(func=run)  # fmt: skip


def decode_options(args):
    """The flags as a validated DecodeOptions (ValueError, one line, naming the flag's option)."""
    from attnlab.decoding.options import DecodeOptions

    heads = None
    if args.align_heads is not None:
        try:
            heads = tuple(int(h) for h in args.align_heads.split(","))
        except ValueError:
            raise ValueError(
                f"--align-heads must be head indices separated by commas, e.g. 0,2; got {args.align_heads!r}"
            ) from None
    try:
        return DecodeOptions(
            beam=args.beam, n_best=args.n_best or 1, sample=args.sample, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, seed=args.seed, length_penalty=args.length_penalty,
            min_len=args.min_len, max_len=args.max_len, no_repeat_ngram=args.no_repeat_ngram, prefix=args.prefix,
            constraints=tuple(args.constraint), align=args.align, align_layer=args.align_layer, align_heads=heads,
        )  # fmt: skip
    except ValueError as e:  # name the flag, not the field
        msg = str(e)
        field = re.match(r"[a-z_]+", msg)
        if field and field.group() in FLAGS:
            msg = FLAGS[field.group()] + msg[field.end() :]
        raise ValueError(msg) from None


# DecodeOptions field -> the flag that sets it (error messages name the flag).
_FIELDS = "beam n_best temperature top_k top_p seed length_penalty min_len max_len no_repeat_ngram prefix align_layer"
FLAGS = {f: "--" + f.replace("_", "-") for f in (*_FIELDS.split(), "align_heads", "sample")}
FLAGS["constraints"] = "--constraint"


def format_lines(index: int, t, n_best: bool, align: bool) -> list[str]:
    """The output lines of one sentence's Translation (None: an empty input line): its text, or with n_best
    one line per hypothesis (an empty input line: one row, empty, score nan)."""
    from attnlab.decoding.alignment import pharaoh

    if t is None:
        return [" ||| ".join([str(index), "", "nan"] + ([""] if align else []))] if n_best else [""]
    hyps = t.nbest or [t]
    if not n_best:
        hyps = hyps[:1]
    lines = []
    for h in hyps:
        fields = [str(index), h.text, f"{h.score:.4f}"] if n_best else [h.text]
        if align:
            fields.append(pharaoh(h.alignment or []))
        lines.append(" ||| ".join(fields))
    return lines


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


class Lines:
    """Where translate writes: stdout, or --out, a new file made when its first lines are ready (so a
    refused run leaves nothing behind). Each `write` is flushed. A closed pipe (`| head`) raises
    PipeClosed; `written` counts the input lines whose output is out."""

    def __init__(self, path: str | None):
        self.path, self.written = path, 0
        self.stream = sys.stdout if path is None else None
        if path is not None:
            check_new_file(path)

    def write(self, lines: list[str], inputs: int) -> None:
        if not lines and self.stream is not None:
            return
        if self.stream is None:
            assert self.path is not None
            # O_EXCL: a path that appeared since the check (another writer, a dangling symlink) is refused
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            self.stream = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        try:
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()
        except BrokenPipeError:
            raise PipeClosed from None
        self.written += inputs

    def close(self) -> None:
        if self.path is not None:
            if self.stream is None:  # no line at all (empty input): the file still says so
                self.write([], 0)
            assert self.stream is not None
            self.stream.close()

    def where(self) -> str:
        return "stdout" if self.path is None else self.path


class PipeClosed(Exception):
    """The reader of stdout went away (`| head -1`): nothing more to write, and nothing to report."""


def check_new_file(path: str) -> None:
    """--out must be a new file in a folder that exists: one line otherwise, before the model loads."""
    p = Path(path)
    if p.is_symlink() or p.exists():
        what = "a symlink" if p.is_symlink() else "a folder" if p.is_dir() else "a file"
        raise FileExistsError(
            f"--out {path} is {what} already there; attnlab translate writes a new file only: choose a new name"
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"--out {path}: the folder {parent} does not exist; create it or choose another path")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"--out {path}: cannot write in {parent}; choose a folder you can write to")


@contextlib.contextmanager
def one_line_warnings(command: str):
    """Warnings (a truncated sentence, a worker process lost) as one line each, without source paths."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"attnlab {command}: warning: {message}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def check_cost(translator, texts: list[str], options, truncate: bool) -> None:
    """Every sentence checked (without --truncate: InputError, before the first line is written); then
    refuse (ValueError, one line) what this machine's memory cannot hold, and warn (one line) when each
    sentence alone would cost more than a default server accepts (attnlab.decoding.cost)."""
    import torch

    from attnlab.decoding.cost import machine_verdict
    from attnlab.utils.machine import memory_bytes

    if truncate:  # cut, never refused for length: the decoder warns about each cut once, as it cuts
        cap = translator.max_len or sys.maxsize
        sources = [min(len(translator.src_vocab.encode(t)) + 1, cap) for t in texts]
    else:
        sources = [len(ids) + 1 for ids in translator.encode(texts)]
    workers = translator.workers or torch.get_num_threads()
    refusal, warning = machine_verdict(translator, sources, options, memory_bytes(), workers=workers)
    if refusal is not None:
        raise ValueError(refusal)
    if warning is not None:
        print(f"attnlab translate: warning: {warning}", file=sys.stderr, flush=True)


def write_translations(out: Lines, lines: list[str], todo: list[int], translate, windows: list[range],
                       n_best: bool, align: bool) -> None:  # fmt: skip
    """Translate lines[todo[k]], one window of k at a time (`translate`: texts -> Translations), and write
    every input line's output in input order (an empty line's for each line not in todo) as soon as it
    and every line before it are done."""
    done = 0  # input lines whose output is written
    for window in windows:
        idx = [todo[k] for k in window]
        rows: list[str] = []
        for i, t in zip(idx, translate([lines[i] for i in idx])):
            rows += [row for blank in range(done, i) for row in format_lines(blank, None, n_best, align)]
            rows += format_lines(i, t, n_best, align)
            done = i + 1
        out.write(rows, done - out.written)
    rows = [row for blank in range(done, len(lines)) for row in format_lines(blank, None, n_best, align)]
    out.write(rows, len(lines) - out.written)


def run(args) -> int:
    import torch

    from attnlab.data.encode_pool import sigterm_unwinds
    from attnlab.decoding.batches import input_windows
    from attnlab.utils.checks import check_range

    if args.beam is None:
        args.beam = 1 if args.sample else DEFAULT_BEAM
    check_range("--beam", args.beam, 1, MAX_BEAM, integer=True)
    options = decode_options(args)  # every flag checked before the model loads
    out = Lines(args.out)  # and --out
    translator = open_translator(args)
    if args.align:  # a model without cross-attention, or a layer/head it lacks: refused before decoding
        translator.alignment_heads(options.align_layer, options.align_heads)
    n_best = args.n_best is not None
    if args.sentences:
        # Arguments that are not UTF-8 reach Python as lone surrogates (surrogateescape).
        sentences = _utf8([s.encode("utf-8", "surrogateescape") for s in args.sentences], "argument")
        todo = list(range(len(sentences)))
        lines = sentences
    else:
        # stdin: one output line per input line (blank in -> blank out), so outputs stay aligned.
        lines = _stdin_lines()
        todo = [i for i, line in enumerate(lines) if line.strip()]
    check_cost(translator, [lines[i] for i in todo], options, args.truncate)

    def translate(texts: list[str]):
        # Plain options take Translator.decode inside `search`, with the options' length penalty.
        return translator.translate_tokens(texts, truncate=args.truncate, options=options, scores=n_best)

    windows = input_windows(len(todo), translator.batch_size, translator.workers or torch.get_num_threads())
    try:
        with sigterm_unwinds(), one_line_warnings("translate"):
            try:
                write_translations(out, lines, todo, translate, windows, n_best, args.align)
            except BaseException as e:  # Ctrl-C, SIGTERM: say what is kept, then go on stopping
                if not isinstance(e, Exception) and out.written < len(lines):
                    print(
                        f"attnlab translate: stopped after {out.written} of {len(lines)} lines; the finished "
                        f"lines are in {out.where()}",
                        file=sys.stderr,
                        flush=True,
                    )
                raise
    except PipeClosed:
        # The reader has all it wanted: stop quietly (stdout now points nowhere, so the interpreter's
        # final flush cannot fail again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        with contextlib.suppress(BrokenPipeError):
            out.close()
    return 0
