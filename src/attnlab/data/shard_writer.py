"""Writing one split of a prepared corpus as fixed-size shards (flat token ids + the lengths index);
`attnlab.data.shards.prepare` drives it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np


class _ShardWriter:
    """Appends encoded pairs of one split to numbered shards of at most `shard_size` pairs."""

    def __init__(self, root: Path, split: str, shard_size: int, dtype):
        self.root, self.split, self.shard_size, self.dtype = root, split, shard_size, dtype
        self.shards: list[dict] = []
        self._files: tuple[IO[bytes], IO[bytes]] | None = None
        self._lens: list[tuple[int, int]] = []

    def _open(self) -> tuple[IO[bytes], IO[bytes]]:
        name = f"{self.split}-{len(self.shards):05d}"
        self._name = name
        # Not `with`: the shard stays open across add() calls; _close() closes it.
        self._files = (open(self.root / f"{name}.src", "wb"), open(self.root / f"{name}.tgt", "wb"))  # noqa: SIM115
        self._lens = []
        return self._files

    def _close(self) -> None:
        if self._files is None:
            return
        for f in self._files:
            f.close()
        lens = np.asarray(self._lens, np.int32).reshape(-1, 2)
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

    def add(self, src_ids: Sequence[int], tgt_ids: Sequence[int]) -> None:
        files = self._files if self._files is not None else self._open()
        files[0].write(np.asarray(src_ids, self.dtype).tobytes())
        files[1].write(np.asarray(tgt_ids, self.dtype).tobytes())
        self._lens.append((len(src_ids), len(tgt_ids)))
        if len(self._lens) >= self.shard_size:
            self._close()

    def finish(self) -> list[dict]:
        self._close()
        return self.shards
