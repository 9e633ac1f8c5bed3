"""Prepared corpora: token-id shards that training memory-maps, planned from a lengths index.

`prepare(data, out, src_lang=..., tgt_lang=...)` reads a corpus (see `formats`), trains or builds the
vocabulary on the training side, and writes `out/`:

    meta.json                   format, languages, settings, per-split shard list, per-file reports
    manifest.json               size and sha256 of every other file, pairs per split (checked on open)
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

import collections
import hashlib
import itertools
import json
import os
import time
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from attnlab.utils.files import atomic_dir

from .corpus import file_sha256
from .encode_pool import ChunkEncoder, check_workers, sigterm_unwinds, spec_of
from .formats import CorpusReport, iter_pairs, split_spec
from .manifest import write_manifest
from .shard_writer import CorpusWriter
from .shards_read import (  # noqa: F401 (reading lives there; re-exported)
    FORMAT,
    META,
    SPLITS,
    VERSION,
    EpochPlan,
    ShardedExamples,
    ShardExample,
    is_prepared,
    open_prepared,
)
from .text import tokenize
from .vocab import DEFAULT_RESERVED, UNK, SubwordVocab, Vocab

TOKENIZERS = ("auto", "word", "bpe", "unigram")
NORMALIZATIONS = ("NFKC", "NFC")
_CHUNK = 8192  # pairs per encoded chunk: the unit of work of the encoding pool


# --------------------------------------------------------------------------- settings
def resolve_tokenizer(tokenizer: str, src_lang: str, tgt_lang: str) -> str:
    """'auto' -> the book's word rules for en-fr, a BPE model with Unicode normalization otherwise."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
    if tokenizer == "auto":
        return "word" if (src_lang, tgt_lang) == ("en", "fr") else "bpe"
    return tokenizer


def _check_settings(src_lang: str, tgt_lang: str, settings: dict) -> None:
    """ValueError naming the first bad setting (`settings` as recorded in meta.json)."""
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
    resolve_tokenizer(settings["tokenizer"], src_lang, tgt_lang)
    if settings["normalization"] not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {settings['normalization']!r}")
    for name, low in (("vocab_size", 8), ("min_freq", 1), ("shard_size", 1), ("tokenizer_sample", 1)):
        value = settings[name]
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    for name in ("max_len", "num_examples"):
        value = settings[name]
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    vf, tf = settings["valid_fraction"], settings["test_fraction"]
    if not (0 <= vf < 1 and 0 <= tf < 1 and vf + tf < 1):
        raise ValueError(f"valid_fraction and test_fraction must be in [0, 1) and sum below 1, got {vf} and {tf}")


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
def _hash_specs(specs: Sequence[str | None]) -> str:
    h = hashlib.sha256()
    for spec in specs:
        for p in split_spec(spec) if spec else []:
            h.update(file_sha256(p).encode())
        h.update(b"|")
    return h.hexdigest()


def _chunks(items: Iterator[tuple]) -> Iterator[tuple]:
    """(line number, source, target, split code) items -> chunks of `_CHUNK` pairs for ChunkEncoder.map:
    ((line numbers, sources, targets, split codes), sources, targets)."""
    while block := list(itertools.islice(items, _CHUNK)):
        linenos, sources, targets, codes = (list(col) for col in zip(*block))
        yield (linenos, sources, targets, codes), sources, targets


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
    _check_settings(src_lang, tgt_lang, settings)
    workers = check_workers(workers)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} already exists and is not empty; choose a new folder (prepare never overwrites)")
    for spec in (data, valid, test):
        if spec is not None:
            split_spec(spec)  # every file exists, before any work
    if (valid is None) != (test is None):
        raise ValueError("give both --valid and --test (files held out as given), or neither (a random split)")
    kind = settings["tokenizer"] = resolve_tokenizer(tokenizer, src_lang, tgt_lang)
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

    # Pass 2: (line number, source, target, split code) items of each input, encoded in chunks.
    def random_split(rep: CorpusReport) -> Iterator[tuple]:
        n = 0
        for lineno, s, t in iter_pairs(data, rep):
            split = _split_of(s, seed, valid_fraction, test_fraction)
            yield lineno, s, t, SPLITS.index(split)
            if split == "train":
                n += 1
                if num_examples is not None and n >= num_examples:
                    return

    def held_out(spec, rep: CorpusReport, code: int, limit: int | None = None) -> Iterator[tuple]:
        for lineno, s, t in itertools.islice(iter_pairs(spec, rep), limit):
            yield lineno, s, t, code

    reps = {name: CorpusReport(files=[]) for name in ("data", "valid", "test")}
    if valid is None:
        inputs = [("data", random_split(reps["data"]))]
    else:
        inputs = [
            ("data", held_out(data, reps["data"], 0, num_examples)),
            ("valid", held_out(valid, reps["valid"], 1)),
            ("test", held_out(test, reps["test"], 2)),
        ]
    local = (src_vocab.encode_batch, tgt_vocab.encode_batch)
    # Outermost: a SIGTERM unwinds the encoder (its workers reaped) and the temporary folder first.
    with (
        sigterm_unwinds(),
        atomic_dir(out) as tmp,
        ChunkEncoder(local, spec_of(kind, src_vocab, tgt_vocab), dtype, workers) as enc,
    ):
        writer = CorpusWriter(tmp, shard_size, dtype, max_len)
        reports = {}
        try:
            for name, items in inputs:
                for (linenos, sources, targets, codes), encoded in enc.map(_chunks(items)):
                    writer.write(linenos, sources, targets, codes, encoded, reps[name])
                reports[name] = reps[name].to_dict()
                if log_given:
                    log(reps[name].summary())
                else:  # no log (train's in-memory path): a warning, so skipped lines are never silent
                    for f in reps[name].files:
                        if f.counts:
                            warnings.warn(f.summary(), stacklevel=2)
            shards = writer.finish()
        except BaseException:
            writer.close()
            raise
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
            "settings": settings,
            "splits": {s: {"pairs": sum(x["pairs"] for x in shards[s]), "shards": shards[s]} for s in SPLITS},
            "reports": reports,
            "seconds": round(seconds, 3),
        }
        (tmp / META).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
        write_manifest(tmp, {s: meta["splits"][s]["pairs"] for s in SPLITS})  # last: it covers every file
    log(
        f"prepared {meta['splits']['train']['pairs']} train / {meta['splits']['valid']['pairs']} valid / "
        f"{meta['splits']['test']['pairs']} test pairs in {seconds:.1f} s"
    )
    return meta
