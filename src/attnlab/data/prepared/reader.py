"""Reading prepared corpora (see `attnlab.data.prepared.layout` for what `prepare` writes): lazy
memory-mapped examples, epoch plans drawn one shard at a time from the lengths index, `open_prepared`.

Nothing here holds a Python object per pair: plans are integer arrays (`BatchPlan`), batches are counted
from a histogram of the lengths, and the held-out splits read their texts from disk when asked, so the
memory of a training process does not grow with the corpus."""

from __future__ import annotations

import bisect
import collections
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..batching import BatchPlan, count_batches, plan_lengths
from ..translation import Example, TranslationData
from ..vocab import load_vocab
from .layout import FORMAT, META, SPLITS, VERSION
from .manifest import check_manifest


class ShardExample:
    """One training pair read from a shard; texts are decoded from the ids only if asked for."""

    __slots__ = ("_vocabs", "src_ids", "tgt_ids")

    def __init__(self, src_ids: list[int], tgt_ids: list[int], vocabs):
        self.src_ids, self.tgt_ids, self._vocabs = src_ids, tgt_ids, vocabs

    @property
    def src_text(self) -> str:
        return self._vocabs[0].decode(self.src_ids)

    @property
    def tgt_text(self) -> str:
        return self._vocabs[1].decode(self.tgt_ids)


class ShardedExamples(Sequence):
    """The training split of a prepared corpus as a lazy sequence of examples.

    Only the shards being read are mapped (at most `max_open`): moving to the next shard unmaps the
    oldest, so resident memory does not grow with the corpus as an epoch goes by.
    """

    max_open = 2

    def __init__(self, root: Path, shards: list[dict], dtype: str, src_vocab, tgt_vocab):
        self.root, self.shards, self.dtype = Path(root), shards, np.dtype(dtype)
        self.vocabs = (src_vocab, tgt_vocab)
        self.starts = np.concatenate([[0], np.cumsum([s["pairs"] for s in shards])]).astype(np.int64)
        self._open: collections.OrderedDict = collections.OrderedDict()
        self._counts: dict = {}

    def __len__(self) -> int:
        return int(self.starts[-1])

    def lengths(self, k: int) -> np.ndarray:
        """(N_k, 2) int32: source and target lengths of shard k (memory-mapped)."""
        return np.load(self.root / f"{self.shards[k]['name']}.len.npy", mmap_mode="r")

    def _shard(self, k: int):
        if k in self._open:
            self._open.move_to_end(k)
            return self._open[k]
        name = self.shards[k]["name"]
        lens = np.asarray(self.lengths(k), np.int64)
        offs = np.zeros((len(lens) + 1, 2), np.int64)
        np.cumsum(lens, axis=0, out=offs[1:])
        # np.memmap refuses an empty file: an empty side reads as an empty array.
        src, tgt = (
            np.memmap(self.root / f"{name}.{side}", dtype=self.dtype, mode="r")
            if offs[-1, j]
            else np.zeros(0, self.dtype)
            for j, side in enumerate(("src", "tgt"))
        )
        self._open[k] = (src, tgt, offs)
        while len(self._open) > self.max_open:
            self._open.popitem(last=False)  # dropping the last reference unmaps it
        return self._open[k]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"example {i} out of range for {len(self)} examples")
        k = bisect.bisect_right(self.starts, i) - 1
        src, tgt, offs = self._shard(k)
        j = i - int(self.starts[k])
        return ShardExample(
            src[offs[j, 0] : offs[j + 1, 0]].tolist(), tgt[offs[j, 1] : offs[j + 1, 1]].tolist(), self.vocabs
        )

    def _padded(self, k: int, opts: dict) -> np.ndarray:
        """(N_k,) the padded length each pair of shard k needs (see `batching._lengths`)."""
        lens = self.lengths(k)
        if opts["num_steps"] is not None:
            return np.full(len(lens), opts["num_steps"], np.int32)
        return lens.max(axis=1) + 1

    def _shard_plan(self, k: int, opts: dict, shuffle: bool, rng) -> BatchPlan:
        return plan_lengths(
            self._padded(k, opts),
            batch_tokens=opts["batch_tokens"],
            batch_size=opts["batch_size"],
            shuffle=shuffle,
            rng=rng,
            offset=int(self.starts[k]),
        )

    def _count(self, k: int, opts: dict) -> int:
        """Batches in shard k: the greedy cut depends on the lengths only, so it is the same every epoch."""
        key = (k, tuple(sorted(opts.items())))
        if key not in self._counts:
            padded = self._padded(k, opts)
            self._counts[key] = count_batches(padded, batch_tokens=opts["batch_tokens"], batch_size=opts["batch_size"])
        return self._counts[key]

    def plan_batches(self, *, batch_tokens, batch_size, num_steps, shuffle, seed, epoch, rank, world_size):
        return EpochPlan(
            self,
            dict(batch_tokens=batch_tokens, batch_size=batch_size, num_steps=num_steps),
            shuffle,
            seed,
            epoch,
            rank,
            world_size,
        )


class HeldOutExample:
    """One pair of a held-out split: ids from its shard, raw texts (the BLEU references) read on access."""

    __slots__ = ("_i", "_split", "_texts", "src_ids", "tgt_ids")

    def __init__(self, src_ids: list[int], tgt_ids: list[int], split: HeldOutExamples, i: int):
        self.src_ids, self.tgt_ids, self._split, self._i = src_ids, tgt_ids, split, i
        self._texts: tuple[str, str] | None = None

    def _pair(self) -> tuple[str, str]:
        if self._texts is None:  # one read of its TSV line serves both texts
            self._texts = self._split.texts(self._i)
        return self._texts

    @property
    def src_text(self) -> str:
        return self._pair()[0]

    @property
    def tgt_text(self) -> str:
        return self._pair()[1]


class HeldOutExamples(Sequence):
    """The valid or test split of a prepared corpus as a lazy sequence: ids memory-mapped from its shards
    (planned like the training split), texts read from its TSV by line offsets (8 bytes a pair in memory),
    so a 1% split of a large corpus costs no Python objects until its pairs are used."""

    def __init__(self, ids: ShardedExamples, tsv: Path):
        self.ids, self.tsv = ids, Path(tsv)
        self.offsets = _line_offsets(self.tsv)
        if len(self.offsets) - 1 != len(ids):
            raise ValueError(
                f"{self.tsv} has {len(self.offsets) - 1} lines for {len(ids)} pairs in the shards; "
                f"the folder is damaged: prepare the corpus again"
            )

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        ex = self.ids[i]
        return HeldOutExample(ex.src_ids, ex.tgt_ids, self, int(i) % len(self))

    def texts(self, i: int) -> tuple[str, str]:
        """(source, target) raw texts of pair i."""
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        with open(self.tsv, "rb") as f:
            f.seek(start)
            src, _, tgt = f.read(end - start).decode("utf-8").rstrip("\n").partition("\t")
        return src, tgt

    def plan_batches(self, **plan) -> EpochPlan:
        return self.ids.plan_batches(**plan)


def _line_offsets(path: Path, chunk: int = 1 << 20) -> np.ndarray:
    """(lines + 1,) int64: where each line of `path` starts, and the file's size; read in chunks."""
    found = [np.zeros(1, np.int64)]
    pos = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            found.append(np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n")).astype(np.int64) + pos + 1)
            pos += len(block)
    offsets = np.concatenate(found)
    if offsets[-1] != pos:  # a last line without its newline
        offsets = np.append(offsets, pos)
    return offsets


class EpochPlan:
    """One epoch's batches for one rank, produced shard by shard (a lazy `plan_batches` result).

    Shards are visited in a (seed, epoch)-shuffled order, batches within a shard in a shuffled order.
    With at least as many shards as ranks, rank r reads shards r, r+W, ... only, and every rank stops
    after the smallest rank's number of batches; with fewer shards, every rank plans all of them and
    takes batches r, r+W, ... (small corpora).
    """

    def __init__(
        self, data: ShardedExamples, opts: dict, shuffle: bool, seed: int, epoch: int, rank: int, world_size: int
    ):
        self.data, self.opts, self.shuffle = data, opts, shuffle
        self.seed, self.epoch, self.rank, self.world = seed, epoch, rank, world_size
        n = len(data.shards)
        self.order = (np.random.default_rng([seed, epoch, 1]).permutation(n) if shuffle else np.arange(n)).tolist()
        self.by_shard = n >= world_size
        if self.by_shard:
            per_rank = [sum(data._count(k, opts) for k in self.order[r::world_size]) for r in range(world_size)]
            self._len = min(per_rank)
        else:
            total = sum(data._count(k, opts) for k in range(n))
            self._len = total // world_size
            if self._len == 0 and total:
                raise ValueError(
                    f"only {total} batch(es) for world_size={world_size}; use smaller batches or fewer processes"
                )

    def __len__(self) -> int:
        return self._len

    def _shard_batches(self, k: int) -> BatchPlan:
        rng = np.random.default_rng([self.seed, self.epoch, 2, k]) if self.shuffle else None
        return self.data._shard_plan(k, self.opts, self.shuffle, rng)

    def __iter__(self) -> Iterator[list[int]]:
        produced = 0
        if self.by_shard:
            for k in self.order[self.rank :: self.world]:
                for b in self._shard_batches(k):
                    if produced >= self._len:
                        return
                    yield b
                    produced += 1
        else:
            i = 0
            for k in self.order:
                for b in self._shard_batches(k):
                    if produced >= self._len:
                        return
                    if i % self.world == self.rank:
                        yield b
                        produced += 1
                    i += 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            return itertools.islice(iter(self), start, stop, step)
        if not -self._len <= index < self._len:
            raise IndexError(f"batch {index} out of range for {self._len}")
        return next(itertools.islice(iter(self), index % self._len, None))


def is_prepared(path: str | os.PathLike) -> bool:
    return Path(path).is_dir() and (Path(path) / META).is_file()


def open_prepared(path: str | os.PathLike, *, full_check: bool | None = None, **ignored):
    """A prepared folder -> `TranslationData` (every split lazy and memory-mapped).

    The folder is first checked against its manifest (`attnlab.data.prepared.manifest`: every file's size, and
    the sha256 of all but a large corpus' training token files; `full_check=True` hashes those too).
    Keyword arguments a preset passes for raw corpora (num_examples, min_freq, ...) are ignored: the
    folder fixed them when it was prepared (its meta.json says how)."""

    root = Path(path)
    if not is_prepared(root):
        raise FileNotFoundError(
            f"{root} is not a prepared corpus (no {META}); create it with `attnlab prepare --data ... --out {root}`"
        )
    try:
        meta = json.loads((root / META).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        fix = f"re-run `attnlab prepare` to rebuild {root}"
        raise ValueError(f"{root / META} is not valid JSON ({exc}); {fix}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        meta = meta if isinstance(meta, dict) else {}
        raise ValueError(
            f"{root / META}: format {meta.get('format')!r} v{meta.get('version')}, expected "
            f"{FORMAT!r} v{VERSION}; prepare the corpus again with this attnlab"
        )
    check_manifest(root, {s: meta["splits"][s]["pairs"] for s in SPLITS}, full=full_check)
    src_vocab, tgt_vocab = load_vocab(root / "src_vocab.json"), load_vocab(root / "tgt_vocab.json")
    splits: dict[str, Sequence[Example]] = {}
    for split in SPLITS:
        shards = meta["splits"][split]["shards"]
        lazy = ShardedExamples(root, shards, meta["dtype"], src_vocab, tgt_vocab)
        if split == "train":
            splits[split] = lazy
            continue
        splits[split] = HeldOutExamples(lazy, root / f"{split}.tsv")
    stats = {s: meta["splits"][s]["pairs"] for s in SPLITS}
    stats.update(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), reports=meta["reports"])
    settings = {
        "data_path": str(root),
        "prepared": True,
        **meta["settings"],
        "src_lang": meta["src_lang"],
        "tgt_lang": meta["tgt_lang"],
    }
    return TranslationData(src_vocab, tgt_vocab, splits["train"], splits["valid"], splits["test"], stats, settings)
