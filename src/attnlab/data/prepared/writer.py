"""Writing a prepared corpus as fixed-size shards (flat token ids + the lengths index), whole encoded
chunks at a time with numpy; `attnlab.data.prepared.pipeline.prepare` drives it."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import numpy as np

from ..formats import CorpusReport
from .encoders import EncodedChunk
from .layout import SPLITS


class _ShardWriter:
    """Appends encoded pairs of one split to numbered shards of at most `shard_size` pairs."""

    def __init__(self, root: Path, split: str, shard_size: int, dtype):
        self.root, self.split, self.shard_size, self.dtype = root, split, shard_size, np.dtype(dtype)
        self.shards: list[dict] = []
        self._files: tuple[IO[bytes], IO[bytes]] | None = None
        self._lens: list[np.ndarray] = []
        self._count = 0

    def _open(self) -> tuple[IO[bytes], IO[bytes]]:
        name = f"{self.split}-{len(self.shards):05d}"
        self._name = name
        # Not `with`: the shard stays open across add_chunk() calls; _close() closes it.
        self._files = (open(self.root / f"{name}.src", "wb"), open(self.root / f"{name}.tgt", "wb"))  # noqa: SIM115
        self._lens, self._count = [], 0
        return self._files

    def _close(self) -> None:
        if self._files is None:
            return
        for f in self._files:
            f.close()
        lens = np.concatenate(self._lens).astype(np.int32) if self._lens else np.zeros((0, 2), np.int32)
        np.save(self.root / f"{self._name}.len.npy", lens)
        self.shards.append(
            {
                "name": self._name,
                "pairs": len(lens),
                "src_tokens": int(lens[:, 0].sum()),
                "tgt_tokens": int(lens[:, 1].sum()),
            }
        )
        self._files = None

    def add_chunk(self, src_flat: np.ndarray, src_lens: np.ndarray, tgt_flat: np.ndarray, tgt_lens: np.ndarray):
        """Append N pairs: flat ids (sum of lens,) and lens (N,) per side; cut at shard boundaries."""
        src_off = np.concatenate([[0], np.cumsum(src_lens)])
        tgt_off = np.concatenate([[0], np.cumsum(tgt_lens)])
        i, n = 0, len(src_lens)
        while i < n:
            files = self._files if self._files is not None else self._open()
            j = min(n, i + self.shard_size - self._count)
            files[0].write(src_flat[src_off[i] : src_off[j]].astype(self.dtype, copy=False).tobytes())
            files[1].write(tgt_flat[tgt_off[i] : tgt_off[j]].astype(self.dtype, copy=False).tobytes())
            self._lens.append(np.stack([src_lens[i:j], tgt_lens[i:j]], axis=1))
            self._count += j - i
            i = j
            if self._count >= self.shard_size:
                self._close()

    def finish(self) -> list[dict]:
        self._close()
        return self.shards


class CorpusWriter:
    """Every split's shards plus the raw texts of the held-out splits (`valid.tsv`, `test.tsv`: the
    BLEU references). Drops, and reports, pairs with more than `max_len` tokens on a side."""

    def __init__(self, root: Path, shard_size: int, dtype, max_len: int | None):
        self.writers = {s: _ShardWriter(root, s, shard_size, dtype) for s in SPLITS}
        self.texts = {s: open(root / f"{s}.tsv", "w", encoding="utf-8") for s in ("valid", "test")}  # noqa: SIM115
        self.max_len = max_len

    def write(self, linenos, sources, targets, codes, enc: EncodedChunk, report: CorpusReport) -> None:
        """One chunk of N pairs: line numbers, texts, split codes (indices into SPLITS), encoding."""
        sl, tl = enc.src_lens, enc.tgt_lens
        codes = np.asarray(codes, np.int8)
        if self.max_len is not None:
            long = (sl > self.max_len) | (tl > self.max_len)
            # Reported in the file of the too-long side (a TSV's one file counts the line once).
            files = report.files if len(report.files) == 2 else report.files * 2
            for i in np.flatnonzero(long).tolist():
                for f, n in zip(files, (sl[i], tl[i])):
                    if n > self.max_len:
                        f.add(f"over-long (> {self.max_len} tokens)", linenos[i])
                report.pairs -= 1
                report.skipped += 1
            codes = np.where(long, -1, codes)
        for code, split in enumerate(SPLITS):
            rows = codes == code
            if not rows.any():
                continue
            if rows.all():
                self.writers[split].add_chunk(enc.src_flat, sl, enc.tgt_flat, tl)
            else:
                src, tgt = enc.src_flat[np.repeat(rows, sl)], enc.tgt_flat[np.repeat(rows, tl)]
                self.writers[split].add_chunk(src, sl[rows], tgt, tl[rows])
            if split in self.texts:
                self.texts[split].writelines(f"{sources[i]}\t{targets[i]}\n" for i in np.flatnonzero(rows).tolist())

    def finish(self) -> dict[str, list[dict]]:
        """Close everything; split -> its shards' entries for meta.json."""
        for f in self.texts.values():
            f.close()
        return {s: w.finish() for s, w in self.writers.items()}

    def close(self) -> None:
        """After an error: close open files (the temporary folder is removed by the caller)."""
        for f in self.texts.values():
            f.close()
        for w in self.writers.values():
            if w._files is not None:
                for fh in w._files:
                    fh.close()
