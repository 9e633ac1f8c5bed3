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

import gzip
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .corpus import read_text

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

    def add(self, kind: str, lineno: int) -> None:
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
    """Reports of every file of one spec; `pairs` counts the pairs that were kept."""

    files: list[FileReport]
    pairs: int = 0

    @property
    def skipped(self) -> int:
        """Pairs skipped (a pair skipped for both sides' reasons counts once per side in the files)."""
        return sum(sum(f.counts.values()) for f in self.files)

    def summary(self) -> str:
        return "; ".join(f.summary() for f in self.files)

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "files": [f.to_dict() for f in self.files]}


def split_spec(spec: str | os.PathLike) -> list[Path]:
    """'a.en,a.de' -> [a.en, a.de]; 'corpus.tsv' -> [corpus.tsv]; each file must exist."""
    parts = [p.strip() for p in str(spec).split(",")]
    if len(parts) > 2 or any(not p for p in parts):
        raise ValueError(
            f"expected a corpus file (TSV or the book's zip) or two aligned files 'SRC,TGT', got {str(spec)!r}"
        )
    paths = [Path(p) for p in parts]
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"corpus file {p} does not exist (from {str(spec)!r}); check the path")
    return paths


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


def _lines(path: Path, report: FileReport) -> Iterator[tuple[int, str | None]]:
    """(line number, text or None when the line was skipped and reported)."""
    try:
        with _open_bytes(path) as f:
            for lineno, raw in enumerate(f, 1):
                report.lines = lineno
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
    reports = [FileReport(str(p)) for p in paths]
    if report is not None:
        report.files[:] = reports
    if len(paths) == 2:
        n_src, n_tgt = count_lines(paths[0]), count_lines(paths[1])
        if n_src != n_tgt:
            raise ValueError(
                f"misaligned corpus: {paths[0]} has {n_src} lines but {paths[1]} has {n_tgt}; "
                f"aligned files need one sentence per line in the same order"
            )
        for (lineno, src), (_, tgt) in zip(_lines(paths[0], reports[0]), _lines(paths[1], reports[1])):
            src = _check_side(src, reports[0], lineno, max_chars)
            tgt = _check_side(tgt, reports[1], lineno, max_chars)
            if src is not None and tgt is not None:
                if report is not None:
                    report.pairs += 1
                yield lineno, src, tgt
        return
    rep = reports[0]
    for lineno, line in _lines(paths[0], rep):
        if line is None:
            continue
        cols = line.split("\t", 2)
        if len(cols) < 2:
            rep.add("without a tab (need src<TAB>tgt)", lineno)
            continue
        src, tgt = (_check_side(c, rep, lineno, max_chars) for c in cols[:2])
        if src is not None and tgt is not None:
            if report is not None:
                report.pairs += 1
            yield lineno, src, tgt


def new_report() -> CorpusReport:
    return CorpusReport(files=[])
