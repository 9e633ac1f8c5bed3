"""How `attnlab translate` writes: the output claimed before any work (`Lines`, a new file or stdout), lines in
input order as their windows finish, flushed; a closed pipe (`PipeClosed`) ends the command quietly."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

from attnlab.utils.checks import all_empty_warning
from attnlab.utils.files import check_new_file, is_device


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
            new = 0 if is_device(self.path) else os.O_CREAT | os.O_EXCL  # /dev/null is written, not created
            fd = os.open(self.path, os.O_WRONLY | new, 0o666)
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


@contextlib.contextmanager
def one_line_warnings(command: str):
    """Warnings (a truncated sentence, a worker process lost) as one line each, without source paths."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"attnlab {command}: warning: {message}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def check_cost(translator, texts: list[str], options, truncate: bool) -> list[list[int]] | None:
    """Every sentence checked (without --truncate: InputError, before the first line is written); then
    refuse (ValueError, one line) what this machine's memory cannot hold, and warn (one line) when each
    sentence alone would cost more than a default server accepts (attnlab.decoding.cost). Returns the
    sentences' source ids (`Translator.encode`: decoding need not encode them again), or None with --truncate,
    whose cuts are made (and warned of) as each window decodes."""
    import torch

    from attnlab.decoding.cost import machine_verdict
    from attnlab.utils.runtime import memory_bytes

    if truncate:  # cut, never refused for length: the decoder warns about each cut once, as it cuts
        cap = translator.max_len or sys.maxsize
        encoded = None
        sources = [min(len(translator.src_vocab.encode(t)) + 1, cap) for t in texts]
    else:
        encoded = translator.encode(texts)
        sources = [len(ids) + 1 for ids in encoded]
    workers = translator.workers or torch.get_num_threads()
    refusal, warning = machine_verdict(translator, sources, options, memory_bytes(), workers=workers)
    if refusal is not None:
        raise ValueError(refusal)
    if warning is not None:
        print(f"attnlab translate: warning: {warning}", file=sys.stderr, flush=True)
    return encoded


def write_translations(out: Lines, lines: list[str], todo: list[int], translate, windows: list[range],
                       n_best: bool, align: bool) -> None:  # fmt: skip
    """Translate lines[todo[k]], one window of k at a time (`translate`: the window's line indices -> each line's
    hypotheses, best first), and write every input line's output in input order (an empty line's for each line not
    in todo) as soon as it and every line before it are done."""
    done, empty = 0, 0  # input lines whose output is written; translations with no text
    for window in windows:
        idx = [todo[k] for k in window]
        rows: list[str] = []
        for i, hyps in zip(idx, translate(idx)):
            empty += not hyps[0].text.strip()
            rows += [row for blank in range(done, i) for row in format_lines(blank, None, n_best, align)]
            rows += format_lines(i, hyps, n_best, align)
            done = i + 1
        out.write(rows, done - out.written)
    rows = [row for blank in range(done, len(lines)) for row in format_lines(blank, None, n_best, align)]
    out.write(rows, len(lines) - out.written)
    warning = all_empty_warning(len(todo), empty)
    if warning:
        print(f"attnlab translate: {warning}", file=sys.stderr)


def answer_lines(out: Lines, read_line, answer) -> None:
    """Interactive: read a line (`read_line`: its text, None at the end), write `answer(index, text)`'s lines
    at once, and only then read the next. A line `answer` refuses (ValueError: too long, a phrase the
    vocabulary lacks...) gets its one-line reason on stderr and one empty output line, and the session goes on."""
    index = 0
    while (text := read_line()) is not None:
        try:
            rows = answer(index, text)
        except ValueError as e:
            print(f"attnlab translate: {e}", file=sys.stderr, flush=True)
            rows = [""]
        out.write(rows, 1)
        index += 1


def format_lines(index: int, hyps: list | None, n_best: bool, align: bool) -> list[str]:
    """The output lines of one sentence's hypotheses, best first (a Translation's `nbest`, or `Hypothesis`es with
    their text; None: an empty input line): the first's text, or with n_best one line per hypothesis (an empty
    input line: one row, empty, score nan)."""
    from attnlab.decoding.align import pharaoh

    if hyps is None:
        return [" ||| ".join([str(index), "", "nan"] + ([""] if align else []))] if n_best else [""]
    if not n_best:
        hyps = hyps[:1]
    lines = []
    for h in hyps:
        fields = [str(index), h.text, f"{h.score:.4f}"] if n_best else [h.text]
        if align:
            fields.append(pharaoh(h.alignment or []))
        lines.append(" ||| ".join(fields))
    return lines
