"""The book's tokenization of a whole corpus file, as flat id arrays into one token table, cached on disk.

The tokenized corpus is cached at `<cache_dir>/tokenized/<sha256 of the data file>-v<N>.pt` as plain
tensors (a uint8 tensor holds the token table as UTF-8), read back with `torch.load(weights_only=True)`:
no pickled code. Word ids are local to the cache; vocabularies are rebuilt from counts each time, so
one cache serves every `min_freq`, seed and split.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attnlab.utils.files import atomic_write_bytes

from .corpus import cache_dir, file_sha256
from .text import preprocess

# Bump when `preprocess`/`tokenize` change: old caches then simply stop matching.
TOKENIZED_CACHE_VERSION = 1
# Below this many pairs, tokenizing directly is faster than building the whole-corpus cache.
_DIRECT_TOKENIZE_LIMIT = 20_000


@dataclass
class Tokenized:
    """Both sides of N pairs as flat id arrays into one shared token table."""

    table: list[str]
    src_flat: np.ndarray  # (sum of source lengths,) int32
    src_off: np.ndarray  # (N + 1,) int64: pair i is src_flat[src_off[i]:src_off[i+1]]
    tgt_flat: np.ndarray
    tgt_off: np.ndarray

    def __len__(self) -> int:
        return len(self.src_off) - 1


def _tokenize_pairs(pairs: Sequence[tuple[str, str]]) -> Tokenized:
    """The book's tokenization of every side, done on one joined string so each step runs in C.

    Equal to `tokenize(side)` per side: a side's first character may gain a leading space when
    preprocessed inside the joined text, and spaces next to the separators are removed below.
    """
    text = preprocess("\n".join(f"{e}\t{f}" for e, f in pairs)).replace("\n", "\t")
    while "  " in text:  # runs of spaces -> one (rare: only a few lines have them)
        text = text.replace("  ", " ")
    text = text.replace(" \t", "\t").replace("\t ", "\t").strip(" ")
    parts = text.split("\t")  # 2N sides: src, tgt, src, tgt, ...
    if len(parts) != 2 * len(pairs):
        raise AssertionError(f"tokenizer lost a side: {len(parts)} parts for {len(pairs)} pairs")
    lens = np.fromiter((p.count(" ") + 1 for p in parts), np.int64, len(parts))
    words = text.replace("\t", " ").split(" ")
    table = {t: i for i, t in enumerate(dict.fromkeys(words))}
    ids = np.fromiter(map(table.__getitem__, words), np.int32, len(words))
    is_src = np.repeat(np.tile(np.array([True, False]), len(pairs)), lens)

    def offsets(n):
        return np.concatenate([[0], np.cumsum(n)]).astype(np.int64)

    return Tokenized(list(table), ids[is_src], offsets(lens[0::2]), ids[~is_src], offsets(lens[1::2]))


def _cache_path(data_path: Path) -> Path:
    return cache_dir() / "tokenized" / f"{file_sha256(data_path)}-v{TOKENIZED_CACHE_VERSION}.pt"


def _save_tokenized(tok: Tokenized, path: Path) -> None:
    obj = {
        "version": TOKENIZED_CACHE_VERSION,
        "table": torch.frombuffer(bytearray("\n".join(tok.table).encode("utf-8")), dtype=torch.uint8),
        "src_flat": torch.from_numpy(tok.src_flat),
        "src_off": torch.from_numpy(tok.src_off),
        "tgt_flat": torch.from_numpy(tok.tgt_flat),
        "tgt_off": torch.from_numpy(tok.tgt_off),
    }
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def _load_tokenized(path: Path) -> Tokenized | None:
    try:
        obj = torch.load(path, weights_only=True)
        table = bytes(obj["table"].numpy()).decode("utf-8").split("\n") if obj["table"].numel() else []
        return Tokenized(
            table, obj["src_flat"].numpy(), obj["src_off"].numpy(), obj["tgt_flat"].numpy(), obj["tgt_off"].numpy()
        )
    except Exception as exc:  # noqa: BLE001 (a damaged cache, however it fails, is disposable: rebuild it)
        warnings.warn(f"ignoring unreadable tokenized cache {path} ({exc}); rebuilding it", stacklevel=2)
        return None


def tokenized_corpus(data_path: Path, pairs, num_examples: int | None, use_cache: bool):
    """(tokenized first-N pairs, whether the disk cache was hit)."""
    n = len(pairs) if num_examples is None else min(num_examples, len(pairs))
    path = _cache_path(data_path) if use_cache else None
    if path is not None and path.is_file():
        tok = _load_tokenized(path)
        if tok is not None and len(tok) == len(pairs):
            return tok, True
    if path is None or n <= _DIRECT_TOKENIZE_LIMIT:
        return _tokenize_pairs(pairs[:n]), False
    tok = _tokenize_pairs(pairs)
    try:
        _save_tokenized(tok, path)
    except OSError as exc:  # a read-only home must not stop training
        warnings.warn(f"could not write tokenized cache {path}: {exc}", stacklevel=2)
    return tok, False
