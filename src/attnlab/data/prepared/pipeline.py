"""Preparing a corpus into the layout of `attnlab.data.prepared.layout`: plan -> encode -> write -> manifest.

`prepare` checks the settings and plans the inputs (`_Plan`), builds the vocabulary from the training side,
encodes chunks of pairs in this process or a pool (`encoders`), appends them to shards (`writer`), then writes
meta.json and, last, the manifest that covers every file (`manifest`).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from attnlab.utils.files import atomic_dir

from ..formats import CorpusReport, iter_pairs, split_spec
from ..text import tokenize
from ..vocab import DEFAULT_RESERVED, UNK, SubwordVocab, Vocab
from .encoders import ChunkEncoder, check_workers, sigterm_unwinds, spec_of
from .layout import FORMAT, META, SPLITS, VERSION, check_settings, resolve_tokenizer, split_of
from .manifest import write_manifest
from .writer import CorpusWriter

_CHUNK = 8192  # pairs per encoded chunk: the unit of work of the encoding pool


def _train_subword(texts: Iterator[str], kind: str, vocab_size: int, min_freq: int, normalization: str) -> SubwordVocab:
    """A shared BPE or unigram model with the Unicode normalizer inside the tokenizer itself, so
    training, `translate` and `serve` all normalize the same way; Metaspace keeps spaces exact."""
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


def _chunks(items: Iterator[tuple]) -> Iterator[tuple]:
    """(line number, source, target, split code) items -> chunks of `_CHUNK` pairs for ChunkEncoder.map:
    ((line numbers, sources, targets, split codes), sources, targets)."""
    while block := list(itertools.islice(items, _CHUNK)):
        linenos, sources, targets, codes = (list(col) for col in zip(*block))
        yield (linenos, sources, targets, codes), sources, targets


@dataclass
class _Plan:
    """What `prepare` reads, in which order, and under which settings (as recorded in meta.json)."""

    data: str | os.PathLike
    valid: str | None
    test: str | None
    src_lang: str
    tgt_lang: str
    settings: dict

    @property
    def kind(self) -> str:
        return self.settings["tokenizer"]

    def _split(self, src: str) -> str:
        s = self.settings
        return split_of(src, s["seed"], s["valid_fraction"], s["test_fraction"])

    def train_pairs(self) -> Iterator[tuple[int, str, str]]:
        """(line number, source, target) of the training side: the vocabulary's first pass."""
        limit, n = self.settings["num_examples"], 0
        for lineno, s, t in iter_pairs(self.data, CorpusReport(files=[])):
            if self.valid is None and self._split(s) != "train":
                continue
            yield lineno, s, t
            n += 1
            if limit is not None and n >= limit:
                break

    def _random_split(self, rep: CorpusReport) -> Iterator[tuple]:
        limit, n = self.settings["num_examples"], 0
        for lineno, s, t in iter_pairs(self.data, rep):
            split = self._split(s)
            yield lineno, s, t, SPLITS.index(split)
            if split == "train":
                n += 1
                if limit is not None and n >= limit:
                    return

    @staticmethod
    def _held_out(spec, rep: CorpusReport, code: int, limit: int | None = None) -> Iterator[tuple]:
        for lineno, s, t in itertools.islice(iter_pairs(spec, rep), limit):
            yield lineno, s, t, code

    def inputs(self, reps: dict[str, CorpusReport]) -> list[tuple[str, Iterator[tuple]]]:
        """(input name, (line number, source, target, split code) items) of each input: the second pass."""
        if self.valid is None:
            return [("data", self._random_split(reps["data"]))]
        return [
            ("data", self._held_out(self.data, reps["data"], 0, self.settings["num_examples"])),
            ("valid", self._held_out(self.valid, reps["valid"], 1)),
            ("test", self._held_out(self.test, reps["test"], 2)),
        ]


def _plan(data, out: Path, src_lang: str, tgt_lang: str, settings: dict) -> _Plan:
    """Check the output folder and every input before any work; ValueError/FileNotFoundError naming it."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} already exists and is not empty; choose a new folder (prepare never overwrites)")
    valid, test = settings["valid"], settings["test"]
    for spec in (data, valid, test):
        if spec is not None:
            split_spec(spec)  # every file exists, before any work
    if (valid is None) != (test is None):
        raise ValueError("give both --valid and --test (files held out as given), or neither (a random split)")
    settings["tokenizer"] = resolve_tokenizer(settings["tokenizer"], src_lang, tgt_lang)
    return _Plan(data, valid, test, src_lang, tgt_lang, settings)


def _vocabularies(plan: _Plan) -> tuple[Vocab | SubwordVocab, Vocab | SubwordVocab]:
    """Pass 1: the source and target vocabularies, from the training side only."""
    s = plan.settings
    src_vocab: Vocab | SubwordVocab
    tgt_vocab: Vocab | SubwordVocab
    if plan.kind == "word":
        counts: tuple[collections.Counter[str], collections.Counter[str]] = (
            collections.Counter(),
            collections.Counter(),
        )
        max_len = s["max_len"]
        for _, src, tgt in plan.train_pairs():
            st, tt = tokenize(src), tokenize(tgt)
            if max_len is None or (len(st) <= max_len and len(tt) <= max_len):
                counts[0].update(st)
                counts[1].update(tt)
        src_vocab = Vocab.from_counts(counts[0], min_freq=s["min_freq"], lang=plan.src_lang)
        tgt_vocab = Vocab.from_counts(counts[1], min_freq=s["min_freq"], lang=plan.tgt_lang)
    else:

        def texts():
            for i, (_, src, tgt) in enumerate(plan.train_pairs()):
                if i >= s["tokenizer_sample"]:
                    return
                yield src
                yield tgt

        shared = _train_subword(texts(), plan.kind, s["vocab_size"], s["min_freq"], s["normalization"])
        src_vocab, tgt_vocab = shared.with_lang(plan.src_lang), shared.with_lang(plan.tgt_lang)
    if len(src_vocab) <= 4 or len(tgt_vocab) <= 4:
        raise ValueError(
            f"{plan.data}: the training side gave an empty vocabulary; is the corpus empty or all held out?"
        )
    return src_vocab, tgt_vocab


def _encode_and_write(plan: _Plan, enc: ChunkEncoder, writer: CorpusWriter, log) -> tuple[dict, dict]:
    """Pass 2: every input's pairs, encoded in chunks and appended to the shards; (shards, reports)."""
    reps = {name: CorpusReport(files=[]) for name in ("data", "valid", "test")}
    reports = {}
    try:
        for name, items in plan.inputs(reps):
            for (linenos, sources, targets, codes), encoded in enc.map(_chunks(items)):
                writer.write(linenos, sources, targets, codes, encoded, reps[name])
            reports[name] = reps[name].to_dict()
            if log is not None:
                log(reps[name].summary())
            else:  # no log (train's in-memory path): a warning, so skipped lines are never silent
                for f in reps[name].files:
                    if f.counts:
                        warnings.warn(f.summary(), stacklevel=3)
        shards = writer.finish()
    except BaseException:
        writer.close()
        raise
    if not shards["train"]:
        raise ValueError(f"{plan.data}: no usable training pair (see the report above); nothing was written")
    return shards, reports


def _write_meta(tmp: Path, plan: _Plan, vocabs, dtype, shards: dict, reports: dict, seconds: float) -> dict:
    """The vocabularies, meta.json and, last, the manifest (it covers every file); returns the meta dict."""
    vocabs[0].save(tmp / "src_vocab.json")
    vocabs[1].save(tmp / "tgt_vocab.json")
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "src_lang": plan.src_lang,
        "tgt_lang": plan.tgt_lang,
        "dtype": np.dtype(dtype).name,
        "settings": plan.settings,
        "splits": {s: {"pairs": sum(x["pairs"] for x in shards[s]), "shards": shards[s]} for s in SPLITS},
        "reports": reports,
        "seconds": round(seconds, 3),
    }
    (tmp / META).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
    write_manifest(tmp, {s: meta["splits"][s]["pairs"] for s in SPLITS})
    return meta


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
    workers: int | None = None,
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
        workers: processes that encode (None: the usable cores). The shards are the same for any
            number; corpora of one chunk (8,192 pairs) are encoded in this process.
        log: a callable taking a progress line (the CLI passes print).
    """
    settings = {
        "data": str(data),
        "valid": valid,
        "test": test,
        "tokenizer": tokenizer,
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
    }
    check_settings(src_lang, tgt_lang, settings)
    workers = check_workers(workers)
    out = Path(out)
    plan = _plan(data, out, src_lang, tgt_lang, settings)
    say = log or (lambda line: None)
    t0 = time.perf_counter()
    src_vocab, tgt_vocab = _vocabularies(plan)
    sizes = f"{len(src_vocab)} source / {len(tgt_vocab)} target entries"
    say(f"vocabulary ({plan.kind}): {sizes} ({time.perf_counter() - t0:.1f} s)")
    dtype = np.uint16 if max(len(src_vocab), len(tgt_vocab)) <= np.iinfo(np.uint16).max else np.int32
    local = (src_vocab.encode_batch, tgt_vocab.encode_batch)
    # Outermost: a SIGTERM unwinds the encoder (its workers reaped) and the temporary folder first.
    with (
        sigterm_unwinds(),
        atomic_dir(out) as tmp,
        ChunkEncoder(local, spec_of(plan.kind, src_vocab, tgt_vocab), dtype, workers) as enc,
    ):
        writer = CorpusWriter(tmp, shard_size, dtype, max_len)
        shards, reports = _encode_and_write(plan, enc, writer, log)
        seconds = time.perf_counter() - t0
        meta = _write_meta(tmp, plan, (src_vocab, tgt_vocab), dtype, shards, reports, seconds)
    pairs = {split: meta["splits"][split]["pairs"] for split in SPLITS}
    say(f"prepared {pairs['train']} train / {pairs['valid']} valid / {pairs['test']} test pairs in {seconds:.1f} s")
    return meta
