"""Reading parallel corpora in the usual formats, with every bad line counted, never silently dropped.

A corpus *spec* (the CLI's `--data`, `--valid`, `--test`) is one of:
  - the book's `fra-eng.zip` (its `fra.txt`), or any TSV `src<TAB>tgt[<TAB>more columns ignored]`;
  - two aligned files `train.en,train.de` (source first, one sentence per line, the Moses/WMT layout).
Any file may be gzip'ed (`.gz`). Lines are read as bytes and decoded one by one, so an undecodable line
is reported with its number instead of failing the whole file.

`iter_pairs(spec)` yields `(line_number, src, tgt)` and fills a `CorpusReport`: per file, the count and
the first few line numbers of empty, over-long, undecodable and (TSV) tab-less lines. Two aligned files
with different line counts are a `ValueError` before anything is read.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .corpus import HEAD_BYTES, check_utf8_head, read_text

# A line longer than this (characters) is reported and skipped: a wrongly split or binary file,
# never a sentence. Token-level length limits (`max_len`) are applied after tokenization.
MAX_LINE_CHARS = 2000
FIRST_LINES = 5  # line numbers kept per problem, for the message


@dataclass
class FileReport:
    """What one file held: problem kind -> count, and the first few 1-based line numbers."""

    path: str
    lines: int = 0
    counts: dict = field(default_factory=dict)
    first_lines: dict = field(default_factory=dict)
    _last: int = field(default=0, repr=False)  # the last line counted: a line is skipped for one reason

    def add(self, kind: str, lineno: int) -> None:
        """Count line `lineno` (1-based, increasing) as skipped for `kind`; a line already counted
        (its other side, or a later check of the same pair) is not counted again."""
        if lineno == self._last:
            return
        self._last = lineno
        self.counts[kind] = self.counts.get(kind, 0) + 1
        first = self.first_lines.setdefault(kind, [])
        if len(first) < FIRST_LINES:
            first.append(lineno)

    def summary(self) -> str:
        if not self.counts:
            return f"{self.path}: {self.lines} lines, all usable"
        parts = [
            f"{n} {kind} (line(s) {', '.join(map(str, self.first_lines[kind]))}{', ...' if n > FIRST_LINES else ''})"
            for kind, n in sorted(self.counts.items())
        ]
        return f"{self.path}: {self.lines} lines; skipped " + "; ".join(parts)

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "lines": self.lines,
            "counts": dict(self.counts),
            "first_lines": {k: list(v) for k, v in self.first_lines.items()},
        }


@dataclass
class CorpusReport:
    """Reports of every file of one spec; `pairs` counts the pairs kept, `skipped` those skipped (once
    each, whichever side or sides were bad)."""

    files: list[FileReport]
    pairs: int = 0
    skipped: int = 0

    def summary(self) -> str:
        return "; ".join(f.summary() for f in self.files)

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "skipped": self.skipped, "files": [f.to_dict() for f in self.files]}


def split_spec(spec: str | os.PathLike) -> list[Path]:
    """'a.en,a.de' -> [a.en, a.de]; 'corpus.tsv' -> [corpus.tsv]; each file must exist."""
    parts = [p.strip() for p in str(spec).split(",")]
    if len(parts) > 2 or any(not p for p in parts):
        raise ValueError(
            f"expected a corpus file (TSV or the book's zip) or two aligned files 'SRC,TGT', got {str(spec)!r}"
        )
    paths = [Path(p) for p in parts]
    for p in paths:
        if p.is_dir():
            raise FileNotFoundError(_folder_message(p, str(spec)))
        if not p.is_file():
            raise FileNotFoundError(f"corpus file {p} does not exist (from {str(spec)!r}); check the path")
    return paths


def _folder_message(folder: Path, spec: str) -> str:
    """What to pass instead of a folder: a prepared corpus is for `train`; otherwise a file in it."""
    if (folder / "meta.json").is_file():
        return (
            f"{folder} is a prepared corpus (a folder), not a corpus file; train on it with "
            f"`attnlab train --data {folder}`, or pass the corpus file it came from"
        )
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))[:4]
    inside = f" (it holds {', '.join(files)}{', ...' if len(files) == 4 else ''})" if files else " (empty)"
    return (
        f"{spec!r} is a folder{inside}, not a corpus file; pass a file in it: a TSV or the book's zip, "
        f"or two aligned files as {folder}/train.SRC,{folder}/train.TGT"
    )


def _open_bytes(path: Path) -> IO[bytes]:
    """The file's bytes: `.gz` decompressed, the book's zip -> its fra.txt member."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]  # a GzipFile is a binary IO
    if path.suffix == ".zip":
        return io.BytesIO(read_text(path).encode("utf-8"))
    return open(path, "rb")


def count_lines(path: Path) -> int:
    """Lines in a (possibly gzip'ed) file; a last line without a newline counts."""
    n, last = 0, b"\n"
    try:
        with _open_bytes(path) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                n += chunk.count(b"\n")
                last = chunk[-1:]
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}: {exc}); is it a damaged .gz?") from None
    return n + (last != b"\n")


def check_encoding(path: Path) -> None:
    """ValueError for a UTF-16/32 file (see `check_utf8_head`); the book's zip is checked when read."""
    if path.suffix == ".zip":
        return
    try:
        with _open_bytes(path) as f:
            head = f.read(HEAD_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}: {exc}); is it a damaged .gz?") from None
    check_utf8_head(head, path)


def _lines(path: Path, report: FileReport) -> Iterator[tuple[int, str | None]]:
    """(line number, text or None when the line was skipped and reported)."""
    try:
        with _open_bytes(path) as f:
            for lineno, raw in enumerate(f, 1):
                report.lines = lineno
                if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8) :]  # the byte-order mark is no part of the first sentence
                if b"\0" in raw:  # NUL is not text (a binary file, or one cut out of UTF-16)
                    report.add("with NUL bytes (binary, not text)", lineno)
                    yield lineno, None
                    continue
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    report.add("undecodable (not UTF-8)", lineno)
                    yield lineno, None
                    continue
                yield lineno, text
    except (EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path} is truncated or not gzip ({type(exc).__name__}: {exc}); re-create it") from None


def _check_side(text: str | None, report: FileReport, lineno: int, max_chars: int) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if not text:
        report.add("empty", lineno)
        return None
    if len(text) > max_chars:
        report.add(f"over-long (> {max_chars} characters)", lineno)
        return None
    return text


def iter_pairs(
    spec: str | os.PathLike, report: CorpusReport | None = None, *, max_chars: int = MAX_LINE_CHARS
) -> Iterator[tuple[int, str, str]]:
    """Yield (line number, source, target) for every usable pair of `spec`, filling `report`.

    Raises ValueError when two aligned files have different line counts (nothing is yielded then).
    """
    paths = split_spec(spec)
    for p in paths:
        check_encoding(p)
    reports = [FileReport(str(p)) for p in paths]
    if report is None:
        report = CorpusReport(files=[])
    report.files[:] = reports
    if len(paths) == 2:
        n_src, n_tgt = count_lines(paths[0]), count_lines(paths[1])
        if n_src != n_tgt:
            raise ValueError(
                f"misaligned corpus: {paths[0]} has {n_src} lines but {paths[1]} has {n_tgt}; "
                f"aligned files need one sentence per line in the same order"
            )
        for (lineno, src), (_, tgt) in zip(_lines(paths[0], reports[0]), _lines(paths[1], reports[1])):
            # Each side in its own file's report: both are checked, each file counts the line once.
            src = _check_side(src, reports[0], lineno, max_chars)
            tgt = _check_side(tgt, reports[1], lineno, max_chars)
            if src is not None and tgt is not None:
                report.pairs += 1
                yield lineno, src, tgt
            else:
                report.skipped += 1
        return
    rep = reports[0]
    for lineno, line in _lines(paths[0], rep):
        cols = [] if line is None else line.split("\t", 2)
        if line is not None and len(cols) < 2:
            rep.add("without a tab (need src<TAB>tgt)", lineno)
        # One file for both sides: the target is checked only when the source passed (one reason a line).
        src = _check_side(cols[0], rep, lineno, max_chars) if len(cols) >= 2 else None
        tgt = _check_side(cols[1], rep, lineno, max_chars) if src is not None else None
        if src is not None and tgt is not None:
            report.pairs += 1
            yield lineno, src, tgt
        else:
            report.skipped += 1


def new_report() -> CorpusReport:
    return CorpusReport(files=[])
