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

import collections
import hashlib
import json
import os
import time
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from attnlab._io import atomic_dir

from .formats import CorpusReport, iter_pairs, split_spec
from .shard_writer import _ShardWriter
from .shards_read import (  # noqa: F401 (reading lives there; re-exported)
    FORMAT,
    META,
    SPLITS,
    VERSION,
    EpochPlan,
    ShardedExamples,
    ShardExample,
    _read_texts,
    is_prepared,
    open_prepared,
)
from .text import tokenize
from .vocab import SubwordVocab, Vocab

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
