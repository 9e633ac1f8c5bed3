"""Prepared corpora: token-id shards that training memory-maps, planned from a lengths index.

`prepare(data, out, src_lang=..., tgt_lang=...)` reads a corpus (see `formats`), trains or builds the
vocabulary on the training side, and writes `out/`:

    meta.json                   format, languages, settings, per-split shard list, per-file reports
    src_vocab.json, tgt_vocab.json
    train-00000.src / .tgt      flat token ids of the shard's pairs (uint16, or int32 past 65,535 types)
    train-00000.len.npy         (N, 2) int32: source and target length of each pair (the lengths index)
    valid-00000.*, test-00000.* the same; plus valid.tsv / test.tsv: the raw texts (BLEU references)

It writes into a temporary folder beside `out` and renames it at the end, so a crash leaves no
half-prepared corpus. `open_prepared(out)` gives a `TranslationData` whose `train` is a
`ShardedExamples`: a lazy sequence of examples (ids read from the memory-mapped shard on access) that
plans its batches one shard at a time from the lengths index, so memory stays bounded by one shard
whatever the corpus size. DDP ranks take disjoint shards.

Splits: `--valid/--test` files when given; otherwise each pair goes to test / valid / train by a seeded
hash of its source sentence, so all translations of one source land in the same split (as the book
loader's `holdout_duplicates`) and the split needs no second pass.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import json
import os
import time
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np

from attnlab._io import atomic_dir

from .formats import CorpusReport, iter_pairs, split_spec
from .text import tokenize
from .vocab import SubwordVocab, Vocab, load_vocab

FORMAT = "attnlab.prepared"
VERSION = 1
META = "meta.json"
SPLITS = ("train", "valid", "test")
TOKENIZERS = ("auto", "word", "bpe", "unigram")
NORMALIZATIONS = ("NFKC", "NFC")
_CHUNK = 8192  # pairs encoded per call (the Rust tokenizer parallelises within a call)


# --------------------------------------------------------------------------- settings
def resolve_tokenizer(tokenizer: str, src_lang: str, tgt_lang: str) -> str:
    """'auto' -> the book's word rules for en-fr, a BPE model with Unicode normalization otherwise."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
    if tokenizer == "auto":
        return "word" if (src_lang, tgt_lang) == ("en", "fr") else "bpe"
    return tokenizer


def _check_settings(
    src_lang,
    tgt_lang,
    tokenizer,
    normalization,
    vocab_size,
    min_freq,
    max_len,
    num_examples,
    valid_fraction,
    test_fraction,
    shard_size,
):
    for name, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if (
            not isinstance(lang, str)
            or not lang.isascii()
            or not (2 <= len(lang) <= 12)
            or not lang.replace("-", "").isalnum()
        ):
            raise ValueError(
                f"{name} must be a language code such as 'en' or 'de' (--src-lang/--tgt-lang), got {lang!r}"
            )
    resolve_tokenizer(tokenizer, src_lang, tgt_lang)
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    checks = (("vocab_size", vocab_size, 8), ("min_freq", min_freq, 1), ("shard_size", shard_size, 1))
    for name, value, low in checks:
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    for name, value in (("max_len", max_len), ("num_examples", num_examples)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    if not (0 <= valid_fraction < 1 and 0 <= test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise ValueError(
            f"valid_fraction and test_fraction must be in [0, 1) and sum below 1, "
            f"got {valid_fraction} and {test_fraction}"
        )


def _split_of(src: str, seed: int, valid_fraction: float, test_fraction: float) -> str:
    """'test' / 'valid' / 'train' from a seeded hash of the (normalized) source sentence."""
    key = unicodedata.normalize("NFKC", " ".join(src.lower().split())).encode("utf-8")
    h = hashlib.blake2b(key, digest_size=8, key=str(seed).encode()).digest()
    u = int.from_bytes(h, "little") / 2.0**64
    return "test" if u < test_fraction else "valid" if u < test_fraction + valid_fraction else "train"


def _train_subword(texts: Iterator[str], kind: str, vocab_size: int, min_freq: int, normalization: str) -> SubwordVocab:
    """A shared BPE or unigram model with the Unicode normalizer inside the tokenizer itself, so
    training, `translate` and `serve` all normalize the same way; Metaspace keeps spaces exact."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    from .vocab import DEFAULT_RESERVED, UNK

    specials = [UNK, *DEFAULT_RESERVED]
    trainer: trainers.BpeTrainer | trainers.UnigramTrainer
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_freq, show_progress=False, special_tokens=specials
        )
    else:
        tok = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, show_progress=False, special_tokens=specials, unk_token=UNK
        )
    tok.normalizer = normalizers.NFKC() if normalization == "NFKC" else normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(texts, trainer=trainer)
    return SubwordVocab(tok, style="plain")


# --------------------------------------------------------------------------- writing
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


def _hash_specs(specs: Sequence[str | None]) -> str:
    from .corpus import file_sha256

    h = hashlib.sha256()
    for spec in specs:
        for p in split_spec(spec) if spec else []:
            h.update(file_sha256(p).encode())
        h.update(b"|")
    return h.hexdigest()


def prepare(
    data: str | os.PathLike,
    out: str | os.PathLike,
    *,
    src_lang: str,
    tgt_lang: str,
    valid: str | None = None,
    test: str | None = None,
    tokenizer: str = "auto",
    vocab_size: int = 8000,
    normalization: str = "NFKC",
    min_freq: int = 2,
    max_len: int | None = None,
    num_examples: int | None = None,
    valid_fraction: float = 0.01,
    test_fraction: float = 0.01,
    seed: int = 0,
    shard_size: int = 250_000,
    tokenizer_sample: int = 1_000_000,
    log=None,
) -> dict:
    """Turn a corpus into prepared shards in `out` (see the module docstring). Returns the meta dict.

    Args:
        data, valid, test: corpus specs (a TSV / the book's zip, or 'src_file,tgt_file'; `.gz` ok).
            Without valid/test, `valid_fraction`/`test_fraction` of the pairs are held out by source.
        src_lang, tgt_lang: language codes naming the pair ('en', 'de', ...).
        tokenizer: 'auto' (word for en-fr, else 'bpe'), 'word' (the book's rules), 'bpe' or 'unigram'
            (one shared model trained on the training side, `vocab_size` entries, `normalization`).
        min_freq: word vocabularies map rarer tokens to <unk>; BPE's minimum merge frequency.
        max_len: pairs with more tokens than this on a side are skipped and reported.
        num_examples: read only the first N usable pairs of `data`.
        shard_size: pairs per shard; the training loader holds about one shard's index at a time.
        tokenizer_sample: subword models are trained on the first N training pairs (SentencePiece's
            `input_sentence_size`), so preparing 5M pairs does not hold 5M sentences in the trainer.
        log: a callable taking a progress line (the CLI passes print).
    """
    _check_settings(
        src_lang,
        tgt_lang,
        tokenizer,
        normalization,
        vocab_size,
        min_freq,
        max_len,
        num_examples,
        valid_fraction,
        test_fraction,
        shard_size,
    )
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} already exists and is not empty; choose a new folder (prepare never overwrites)")
    for spec in (data, valid, test):
        if spec is not None:
            split_spec(spec)  # every file exists, before any work
    if (valid is None) != (test is None):
        raise ValueError("give both --valid and --test (files held out as given), or neither (a random split)")
    kind = resolve_tokenizer(tokenizer, src_lang, tgt_lang)
    log_given = log is not None
    log = log or (lambda line: None)
    t0 = time.perf_counter()

    def train_pairs() -> Iterator[tuple[int, str, str]]:
        report = CorpusReport(files=[])
        n = 0
        for lineno, s, t in iter_pairs(data, report):
            if valid is None and _split_of(s, seed, valid_fraction, test_fraction) != "train":
                continue
            yield lineno, s, t
            n += 1
            if num_examples is not None and n >= num_examples:
                break

    # Pass 1: the vocabulary from the training side only.
    src_vocab: Vocab | SubwordVocab
    tgt_vocab: Vocab | SubwordVocab
    if kind == "word":
        counts: tuple[collections.Counter[str], collections.Counter[str]] = (
            collections.Counter(),
            collections.Counter(),
        )
        for _, s, t in train_pairs():
            st, tt = tokenize(s), tokenize(t)
            if max_len is None or (len(st) <= max_len and len(tt) <= max_len):
                counts[0].update(st)
                counts[1].update(tt)
        src_vocab = Vocab.from_counts(counts[0], min_freq=min_freq, lang=src_lang)
        tgt_vocab = Vocab.from_counts(counts[1], min_freq=min_freq, lang=tgt_lang)
    else:

        def texts():
            for i, (_, s, t) in enumerate(train_pairs()):
                if i >= tokenizer_sample:
                    return
                yield s
                yield t

        shared = _train_subword(texts(), kind, vocab_size, min_freq, normalization)
        src_vocab, tgt_vocab = shared.with_lang(src_lang), shared.with_lang(tgt_lang)
    if len(src_vocab) <= 4 or len(tgt_vocab) <= 4:
        raise ValueError(f"{data}: the training side gave an empty vocabulary; is the corpus empty or all held out?")
    log(
        f"vocabulary ({kind}): {len(src_vocab)} source / {len(tgt_vocab)} target entries "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    dtype = np.uint16 if max(len(src_vocab), len(tgt_vocab)) <= np.iinfo(np.uint16).max else np.int32

    with atomic_dir(out) as tmp:  # `out` is absent or empty (checked above)
        writers = {s: _ShardWriter(tmp, s, shard_size, dtype) for s in SPLITS}
        texts_out = {s: open(tmp / f"{s}.tsv", "w", encoding="utf-8") for s in ("valid", "test")}  # noqa: SIM115
        reports = {}

        def encode(vocab, xs):
            return [vocab.encode(x) for x in xs] if kind == "word" else vocab.encode_batch(xs)

        def write(split_of, pairs, report: CorpusReport, name: str):
            chunk: list[tuple] = []  # (line number, source, target[, known split])

            def flush():
                src_ids, tgt_ids = encode(src_vocab, [p[1] for p in chunk]), encode(tgt_vocab, [p[2] for p in chunk])
                for (lineno, s, t, *known), si, ti in zip(chunk, src_ids, tgt_ids):
                    if max_len is not None and (len(si) > max_len or len(ti) > max_len):
                        # Reported in the file of the too-long side (the first file for a TSV).
                        for f, ids in zip(report.files if len(report.files) == 2 else report.files * 2, (si, ti)):
                            if len(ids) > max_len:
                                f.add(f"over-long (> {max_len} tokens)", lineno)
                        report.pairs -= 1
                        continue
                    split = known[0] if known else split_of(s)  # the random split was decided while reading
                    writers[split].add(si, ti)
                    if split in texts_out:
                        texts_out[split].write(f"{s}\t{t}\n")
                chunk.clear()

            for item in pairs:
                chunk.append(item)
                if len(chunk) >= _CHUNK:
                    flush()
            if chunk:
                flush()
            reports[name] = report.to_dict()
            if log_given:
                log(report.summary())
            else:  # no log (train's in-memory path): a warning, so skipped lines are never silent
                for f in report.files:
                    if f.counts:
                        warnings.warn(f.summary(), stacklevel=3)

        rep = CorpusReport(files=[])
        if valid is None:

            def limited():
                n = 0
                for item in iter_pairs(data, rep):
                    split = _split_of(item[1], seed, valid_fraction, test_fraction)
                    yield (*item, split)
                    if split == "train":
                        n += 1
                        if num_examples is not None and n >= num_examples:
                            return

            write(None, limited(), rep, "data")
        else:

            def first_n():
                for i, item in enumerate(iter_pairs(data, rep)):
                    if num_examples is not None and i >= num_examples:
                        return
                    yield item

            write(lambda s: "train", first_n(), rep, "data")
            for split, spec in (("valid", valid), ("test", test)):
                assert spec is not None  # checked above: valid and test come together
                r = CorpusReport(files=[])
                write(lambda s, split=split: split, iter_pairs(spec, r), r, split)
        for f in texts_out.values():
            f.close()
        shards = {s: w.finish() for s, w in writers.items()}
        if not shards["train"]:
            raise ValueError(f"{data}: no usable training pair (see the report above); nothing was written")
        src_vocab.save(tmp / "src_vocab.json")
        tgt_vocab.save(tmp / "tgt_vocab.json")
        seconds = time.perf_counter() - t0
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
            "dtype": np.dtype(dtype).name,
            "settings": {
                "data": str(data),
                "valid": valid,
                "test": test,
                "tokenizer": kind,
                "vocab_size": vocab_size,
                "normalization": normalization,
                "min_freq": min_freq,
                "max_len": max_len,
                "num_examples": num_examples,
                "valid_fraction": valid_fraction,
                "test_fraction": test_fraction,
                "seed": seed,
                "shard_size": shard_size,
                "tokenizer_sample": tokenizer_sample,
            },
            "splits": {s: {"pairs": sum(x["pairs"] for x in shards[s]), "shards": shards[s]} for s in SPLITS},
            "reports": reports,
            "seconds": round(seconds, 3),
        }
        (tmp / META).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
    log(
        f"prepared {meta['splits']['train']['pairs']} train / {meta['splits']['valid']['pairs']} valid / "
        f"{meta['splits']['test']['pairs']} test pairs into {out} in {seconds:.1f} s"
    )
    return meta


# --------------------------------------------------------------------------- reading
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

    def _shard_plan(self, k: int, opts: dict, shuffle: bool, rng) -> list[list[int]]:
        from .batching import plan_lengths

        lens = np.asarray(self.lengths(k), np.int64)
        if opts["num_steps"] is not None:
            padded = np.full(len(lens), opts["num_steps"], np.int64)
        else:
            padded = lens.max(axis=1) + 1
        start = int(self.starts[k])
        plan = plan_lengths(
            padded, batch_tokens=opts["batch_tokens"], batch_size=opts["batch_size"], shuffle=shuffle, rng=rng
        )
        return [[start + i for i in b] for b in plan]

    def _count(self, k: int, opts: dict) -> int:
        """Batches in shard k: the greedy cut depends on the lengths only, so it is the same every epoch."""
        key = (k, tuple(sorted(opts.items())))
        if key not in self._counts:
            self._counts[key] = len(self._shard_plan(k, opts, False, None))
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

    def _shard_batches(self, k: int) -> list[list[int]]:
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
        import itertools

        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            return itertools.islice(iter(self), start, stop, step)
        if not -self._len <= index < self._len:
            raise IndexError(f"batch {index} out of range for {self._len}")
        return next(itertools.islice(iter(self), index % self._len, None))


def is_prepared(path: str | os.PathLike) -> bool:
    return Path(path).is_dir() and (Path(path) / META).is_file()


def _read_texts(path: Path) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [(src, tgt) for src, tgt in (line.rstrip("\n").split("\t", 1) for line in f)]


def open_prepared(path: str | os.PathLike, **ignored):
    """A prepared folder -> `TranslationData` (train lazy and memory-mapped; valid/test in memory).

    Keyword arguments a preset passes for raw corpora (num_examples, min_freq, ...) are ignored: the
    folder fixed them when it was prepared (its meta.json says how)."""
    from .translation import Example, TranslationData

    root = Path(path)
    if not is_prepared(root):
        raise FileNotFoundError(
            f"{root} is not a prepared corpus (no {META}); create it with `attnlab prepare --data ... --out {root}`"
        )
    meta = json.loads((root / META).read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(
            f"{root / META}: format {meta.get('format')!r} v{meta.get('version')}, expected "
            f"{FORMAT!r} v{VERSION}; prepare the corpus again with this attnlab"
        )
    src_vocab, tgt_vocab = load_vocab(root / "src_vocab.json"), load_vocab(root / "tgt_vocab.json")
    splits: dict[str, Sequence[Example]] = {}
    for split in SPLITS:
        shards = meta["splits"][split]["shards"]
        lazy = ShardedExamples(root, shards, meta["dtype"], src_vocab, tgt_vocab)
        if split == "train":
            splits[split] = lazy
            continue
        texts = _read_texts(root / f"{split}.tsv")
        splits[split] = [Example(ex.src_ids, ex.tgt_ids, s, t) for ex, (s, t) in zip(lazy, texts)]
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
