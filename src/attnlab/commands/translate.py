"""`attnlab translate`: source sentences (arguments, or stdin one a line) -> their translations, one a line.

attnlab translate "i'm home ." "he's calm ."
attnlab translate --checkpoint runs/laptop             # in a terminal: type a sentence, Enter, its translation
echo "go ." | attnlab translate --checkpoint runs/d2l --beam 1        # greedy (default: the run's, beam 4)
attnlab translate --beam 5 --n-best 3 "i'm home ."        # 0 ||| je suis chez moi . ||| -0.1234
attnlab translate --sample --top-p 0.9 --n-best 4 --seed 1 "i'm home ."
attnlab translate --beam 5 --constraint "à la maison" --align "i'm home ."

With --n-best, each hypothesis is a line SOURCE_INDEX ||| translation ||| score (0-based index of the
input sentence; an empty input line gets one row with an empty translation and score nan); --align
appends ||| i-j ... (source word i, target word j, 0-based, whitespace words).
A decoding flag not given takes the run's default (RUN/generation.json; beam 4 where it has none).

In a terminal (stdin a tty) or with --interactive, each line is translated and printed as soon as Enter
(a newline) comes, until Ctrl-D (end of input); a line it cannot translate gets one line on stderr and an
empty output line. Otherwise stdin is read whole, and lines are written in input order as soon as they and
every line before them are done, flushed: the input is decoded in windows sized by the speed measured on
the one before (the first of a few lines, each next about a second's work), so the first lines come out
within about a second, `| head -1` ends quietly, and a stopped run (Ctrl-C, SIGTERM) keeps every finished
line on stdout or in --out.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace

from attnlab.commands._common import (
    add_checkpoint_args,
    add_command,
    add_option_flags,
    decode_options,
    named,
    run_defaults,
)
from attnlab.commands._stream import (
    Lines,
    PipeClosed,
    answer_lines,
    check_cost,
    format_lines,
    one_line_warnings,
    write_translations,
)


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "translate", "translate sentences with a trained model", __doc__)
    p.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate (default: stdin)")
    add_checkpoint_args(p)
    p.add_argument("--truncate", action="store_true", help="cut sentences longer than the model's max_len")
    p.add_argument(
        "--interactive",
        action="store_true",
        help="translate each stdin line as soon as it ends, one answer per line, until end of input (default: "
        "so when stdin is a terminal; else stdin is read whole, then decoded in windows)",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the translations to FILE, a new file (never one that exists), line by line as they finish "
        "(default: stdout)",
    )
    add_option_flags(p.add_argument_group("decoding options (attnlab.decoding.DecodeOptions; default: the run's)"))
    p.set_defaults(func=run)  # fmt: skip


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


def _stdin_line() -> str | None:
    """The next stdin line as soon as it ends (a terminal hands it over at Enter), without its newline; None at
    end of input. Bytes that are not UTF-8 become U+FFFD, with a warning."""
    buffer = getattr(sys.stdin, "buffer", None)
    raw = buffer.readline() if buffer is not None else sys.stdin.readline().encode("utf-8", "surrogateescape")
    if not raw:
        return None
    return _utf8([raw.rstrip(b"\r\n")], "stdin line")[0]


def _hypotheses(translator, texts: list[str], src_ids, options, truncate: bool, whole: bool) -> list[list]:
    """Each sentence's hypotheses, best first: Translations (their n-best lists) where `whole` (--n-best, --align)
    or the sentences are not encoded yet (--truncate); else the hypotheses themselves, which the workers
    detokenized: the text alone needs no Translation (token lists, a copy of the best) per line."""
    from attnlab.decoding.options import OptionError

    try:
        if whole or src_ids is None:
            found = translator.translate_tokens(texts, truncate=truncate, options=options, src_ids=src_ids)
            return [t.nbest or [t] for t in found]
        return translator.search(src_ids, options, texts=True)
    except OptionError as e:  # options these sentences cannot hold (a prefix past a limit...): name the flag
        raise ValueError(named(e)) from None


def run(args) -> int:
    import torch

    from attnlab.data.prepared.encoders import sigterm_unwinds
    from attnlab.decoding.batches import paced_windows
    from attnlab.runs.loading import open_translator
    from attnlab.utils.runtime import gc_frozen

    options = decode_options(args, run_defaults(args))  # every flag checked before the model loads
    out = Lines(args.out)  # and --out
    translator = open_translator(args.checkpoint, args.device, args.weights, args.precision)
    if args.align:  # a model without cross-attention, or a layer/head it lacks: refused before decoding
        translator.alignment_heads(options.align_layer, options.align_heads)
    n_best = args.n_best is not None
    scored = replace(options, scores=n_best)  # only --n-best prints scores: greedy may skip them
    if args.interactive and args.sentences:
        raise ValueError(
            f"--interactive reads its sentences from stdin, got {len(args.sentences)} on the command line; "
            "drop them or --interactive"
        )
    interactive = not args.sentences and (args.interactive or sys.stdin.isatty())
    if args.sentences:
        # Arguments that are not UTF-8 reach Python as lone surrogates (surrogateescape).
        lines = _utf8([s.encode("utf-8", "surrogateescape") for s in args.sentences], "argument")
        todo = list(range(len(lines)))
    elif interactive:
        lines, todo = [], []
    else:
        # stdin: one output line per input line (blank in -> blank out), so outputs stay aligned.
        lines = _stdin_lines()
        todo = [i for i, line in enumerate(lines) if line.strip()]
    encoded = check_cost(translator, [lines[i] for i in todo], options, args.truncate)
    ids = dict(zip(todo, encoded)) if encoded is not None else None  # line index -> its source ids

    def translate(texts: list[str], src_ids=None) -> list[list]:
        return _hypotheses(translator, texts, src_ids, scored, args.truncate, whole=n_best or args.align)

    def window(idx: list[int]):  # a window of stdin's or the arguments' lines, encoded once already
        return translate([lines[i] for i in idx], None if ids is None else [ids[i] for i in idx])

    def answer(index: int, text: str) -> list[str]:  # interactive: one line, checked and translated as it comes
        if text.strip():
            encoded = check_cost(translator, [text], options, args.truncate)
            return format_lines(index, translate([text], encoded)[0], n_best, args.align)
        return format_lines(index, None, n_best, args.align)

    workers = translator.workers or torch.get_num_threads()
    windows = paced_windows(len(todo), translator.batch_size, workers)
    try:
        with sigterm_unwinds(), one_line_warnings("translate"), gc_frozen():  # the loaded model: never garbage
            try:
                if interactive:
                    if sys.stdin.isatty() and sys.stderr.isatty():
                        print("attnlab translate: type a sentence and Enter; Ctrl-D ends", file=sys.stderr, flush=True)
                    answer_lines(out, _stdin_line, answer)
                else:
                    write_translations(out, lines, todo, window, windows, n_best, args.align)
            except BaseException as e:  # Ctrl-C, SIGTERM: say what is kept, then go on stopping
                if not isinstance(e, Exception) and (interactive or out.written < len(lines)):
                    of = "" if interactive else f" of {len(lines)}"
                    print(
                        f"attnlab translate: stopped after {out.written}{of} lines; the finished "
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
