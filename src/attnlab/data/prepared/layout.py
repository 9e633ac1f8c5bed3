"""The layout of a prepared corpus: token-id shards that training memory-maps, planned from a lengths index.

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

import hashlib
import unicodedata

FORMAT = "attnlab.prepared"
VERSION = 2  # 2: a manifest.json of every file's size and sha256
META = "meta.json"
SPLITS = ("train", "valid", "test")  # split code -> name (codes index this tuple)
TOKENIZERS = ("auto", "word", "bpe", "unigram")
NORMALIZATIONS = ("NFKC", "NFC")


def resolve_tokenizer(tokenizer: str, src_lang: str, tgt_lang: str) -> str:
    """'auto' -> the book's word rules for en-fr, a BPE model with Unicode normalization otherwise."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
    if tokenizer == "auto":
        return "word" if (src_lang, tgt_lang) == ("en", "fr") else "bpe"
    return tokenizer


def check_settings(src_lang: str, tgt_lang: str, settings: dict) -> None:
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


def split_of(src: str, seed: int, valid_fraction: float, test_fraction: float) -> str:
    """'test' / 'valid' / 'train' from a seeded hash of the (normalized) source sentence."""
    key = unicodedata.normalize("NFKC", " ".join(src.lower().split())).encode("utf-8")
    h = hashlib.blake2b(key, digest_size=8, key=str(seed).encode()).digest()
    u = int.from_bytes(h, "little") / 2.0**64
    return "test" if u < test_fraction else "valid" if u < test_fraction + valid_fraction else "train"
