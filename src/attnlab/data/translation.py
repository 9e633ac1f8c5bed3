"""From the corpus file to encoded train/valid/test splits: `load_translation_data`, `load_d2l_data`.

Pipeline: raw pairs -> the book's tokenization (cached on disk, `attnlab.data.tokenized`) -> first
`num_examples` pairs -> `max_len` filter -> seeded split (grouped by source sentence) -> vocabularies from
the training split only -> `Example`s holding ids and the raw texts (the raw target text is the BLEU reference).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .batching import iterate_batches
from .corpus import read_fra_eng, resolve_data_path, sample_data_path
from .tokenized import Tokenized, tokenized_corpus
from .vocab import SubwordVocab, Vocab

# The book's four evaluation sentences (section "Sequence to Sequence Learning").
BOOK_EVAL_PAIRS = [
    ("go .", "va !"),
    ("i lost .", "j'ai perdu ."),
    ("he's calm .", "il est calme ."),
    ("i'm home .", "je suis chez moi ."),
]
# Credit for the corpus, shown by the report, the demo and the explorer (its licence asks for it).
ATTRIBUTION = (
    "English–French sentence pairs from the Tatoeba project (tatoeba.org) via manythings.org/anki, CC-BY 2.0 (France)"
)
# The bundled sample, credited as what it is by whatever learned from it (the demo's report, the explorer's footer).
SAMPLE_CREDIT = "attnlab's bundled sample of 64 English–French pairs (attnlab/data/sample, not the Tatoeba corpus)"


def data_credit(data_path: str | os.PathLike | None) -> str:
    """What a report or page credits for a model trained on `data_path`: the bundled sample, else the corpus."""
    if data_path is not None and Path(data_path).resolve() == sample_data_path().resolve():
        return SAMPLE_CREDIT
    return ATTRIBUTION


@dataclass(slots=True)
class Example:
    """One sentence pair: ids without <bos>/<eos>, and the raw texts as in the corpus."""

    src_ids: list[int]
    tgt_ids: list[int]
    src_text: str
    tgt_text: str


@dataclass
class TranslationData:
    """Vocabularies and splits. `stats` counts what was read/filtered; `settings` reproduces the load;
    `batching` holds the preset's default `iterate_batches` arguments (e.g. the book's fixed shapes)."""

    src_vocab: Vocab | SubwordVocab
    tgt_vocab: Vocab | SubwordVocab
    train: Sequence[Example]  # a list, or a lazy ShardedExamples for a prepared corpus
    valid: Sequence[Example]
    test: Sequence[Example]
    stats: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    batching: dict = field(default_factory=dict)

    def batches(self, split: str = "train", **kwargs):
        """`iterate_batches` over a split with this data's vocabularies and default batching."""

        if split not in ("train", "valid", "test"):
            raise ValueError(f"split must be 'train', 'valid' or 'test', got {split!r}")
        opts = {**self.batching, **kwargs}
        return iterate_batches(getattr(self, split), self.src_vocab, self.tgt_vocab, **opts)


# --------------------------------------------------------------------------- splits
def _split_indices(keys: Sequence, seed: int, valid_fraction: float, test_fraction: float):
    """Shuffle groups of equal key with `seed`; fill test, then valid, the rest is train.

    Returns three sorted index arrays. Whole groups move together, so with keys = source sentences
    no valid/test source is ever seen in training.
    """
    groups: dict = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    members = list(groups.values())
    order = np.random.default_rng(seed).permutation(len(members))
    n = len(keys)
    n_test, n_valid = round(test_fraction * n), round(valid_fraction * n)
    test: list[int] = []
    valid: list[int] = []
    train: list[int] = []
    for g in order:
        if len(test) < n_test:
            test.extend(members[g])
        elif len(valid) < n_valid:
            valid.extend(members[g])
        else:
            train.extend(members[g])
    return (
        np.sort(np.asarray(train, np.int64)),
        np.sort(np.asarray(valid, np.int64)),
        np.sort(np.asarray(test, np.int64)),
    )


def _slices(flat_list: list[int], off_list: list[int], idx: np.ndarray) -> list[list[int]]:
    return [flat_list[off_list[i] : off_list[i + 1]] for i in idx.tolist()]


@contextlib.contextmanager
def _gc_paused():
    """Building ~10^6 small lists triggers the cyclic GC over and over (it scans every live object
    each time): pausing it cuts the full-corpus load from ~6 s to ~2 s. Nothing here makes cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _word_vocab(tok: Tokenized, side: str, idx: np.ndarray, min_freq: int, lang: str) -> tuple[Vocab, np.ndarray]:
    """Vocab from the token counts of examples `idx`, and a lookup table: corpus token id -> vocab id."""
    flat, off = getattr(tok, f"{side}_flat"), getattr(tok, f"{side}_off")
    lens = np.diff(off)
    rows = np.zeros(len(lens), bool)
    rows[idx] = True
    counts = np.bincount(flat[np.repeat(rows, lens)], minlength=len(tok.table))
    present = np.nonzero(counts)[0]
    vocab = Vocab.from_counts({tok.table[i]: int(counts[i]) for i in present}, min_freq=min_freq, lang=lang)
    lut = np.fromiter((vocab.token_to_idx.get(t, 0) for t in tok.table), np.int64, len(tok.table))
    return vocab, lut


def _check_options(tokenizer: str, valid_fraction: float, test_fraction: float, num_examples, max_len) -> None:
    """ValueError naming the first option of `load_translation_data` out of its range."""
    if tokenizer not in ("word", "bpe"):
        raise ValueError(f"tokenizer must be 'word' or 'bpe', got {tokenizer!r}")
    if not (0 <= valid_fraction < 1 and 0 <= test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise ValueError(
            f"valid_fraction and test_fraction must be in [0, 1) and sum below 1, "
            f"got {valid_fraction} and {test_fraction}"
        )
    if num_examples is not None and num_examples < 1:
        raise ValueError(f"num_examples must be a positive number of pairs or None, got {num_examples}")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be a positive number of tokens or None, got {max_len}")


def _kept_and_split(tok: Tokenized, n: int, max_len, holdout_duplicates: bool, seed: int, fractions):
    """(indices kept by `max_len`, their grouping keys, train / valid / test indices) of the first `n` pairs."""
    idx = np.arange(n)
    src_len, tgt_len = np.diff(tok.src_off)[:n], np.diff(tok.tgt_off)[:n]
    if max_len is not None:
        idx = idx[(src_len <= max_len) & (tgt_len <= max_len)]
    if len(idx) == 0:
        raise ValueError(f"no pair has at most max_len={max_len} tokens on both sides; raise max_len")

    keys: Sequence[object]  # what groups pairs into one split: the source ids, or each pair alone
    if holdout_duplicates:
        src_list, off = tok.src_flat.tolist(), tok.src_off.tolist()
        keys = [tuple(src_list[off[i] : off[i + 1]]) for i in idx.tolist()]
    else:
        keys = range(len(idx))
    tr, va, te = (idx[s] for s in _split_indices(keys, seed, *fractions))
    if len(tr) == 0:
        raise ValueError(f"the training split is empty ({len(idx)} pairs kept); use more data or smaller fractions")
    return idx, keys, tr, va, te


def _vocabs_and_encode(tok: Tokenized, pairs, tr: np.ndarray, tokenizer: str, min_freq: int, bpe_vocab_size: int):
    """(source vocab, target vocab, encode: split indices -> `Example`s), vocabularies from `tr` only."""

    def texts(split):
        return [pairs[i] for i in split.tolist()]

    src_vocab: Vocab | SubwordVocab
    tgt_vocab: Vocab | SubwordVocab
    if tokenizer == "word":
        src_vocab, src_lut = _word_vocab(tok, "src", tr, min_freq, "en")
        tgt_vocab, tgt_lut = _word_vocab(tok, "tgt", tr, min_freq, "fr")
        src_mapped, tgt_mapped = src_lut[tok.src_flat].tolist(), tgt_lut[tok.tgt_flat].tolist()
        src_off, tgt_off = tok.src_off.tolist(), tok.tgt_off.tolist()

        def encode(split):
            return [
                Example(s, t, e, f)
                for s, t, (e, f) in zip(
                    _slices(src_mapped, src_off, split), _slices(tgt_mapped, tgt_off, split), texts(split)
                )
            ]
    else:
        bpe = SubwordVocab.train(
            [side for pair in texts(tr) for side in pair], vocab_size=bpe_vocab_size, min_freq=min_freq
        )
        src_vocab, tgt_vocab = bpe.with_lang("en"), bpe.with_lang("fr")

        def encode(split):
            ps = texts(split)
            src_ids = bpe.encode_batch([e for e, _ in ps])
            tgt_ids = bpe.encode_batch([f for _, f in ps])
            return [Example(s, t, e, f) for s, t, (e, f) in zip(src_ids, tgt_ids, ps)]

    return src_vocab, tgt_vocab, encode


@_gc_paused()
def load_translation_data(
    path: str | os.PathLike | None = None,
    *,
    num_examples: int | None = None,
    max_len: int | None = None,
    min_freq: int = 2,
    seed: int = 0,
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    holdout_duplicates: bool = True,
    tokenizer: str = "word",
    bpe_vocab_size: int = 8000,
    use_cache: bool = True,
) -> TranslationData:
    """Load, split and encode the English–French corpus.

    Args:
        path: the data file (see `read_fra_eng` for the search order when None).
        num_examples: keep the first N pairs of the file (the book's small setting: 600).
        max_len: drop pairs with more than `max_len` *word* tokens (book tokenization, no <eos>) on
            either side; measured in words for every tokenizer, so word and BPE runs see the same pairs.
        min_freq: word vocabularies map rarer training tokens to <unk>; BPE's minimum merge frequency.
        seed: the split shuffle.
        valid_fraction, test_fraction: split sizes (at least these fractions of the kept pairs).
        holdout_duplicates: split by source sentence (the corpus often gives several French
            translations of one English sentence), so no valid/test source appears in train.
        tokenizer: 'word' (the book's) or 'bpe' (one shared `SubwordVocab` of `bpe_vocab_size`).
        use_cache: read/write the tokenized-corpus cache.
    """
    _check_options(tokenizer, valid_fraction, test_fraction, num_examples, max_len)

    data_path = resolve_data_path(path)
    pairs, read_stats = read_fra_eng(data_path, return_stats=True)  # warns about malformed lines
    if not pairs:
        raise ValueError(f"{data_path} holds no tab-separated English–French pairs")
    tok, cache_hit = tokenized_corpus(data_path, pairs, num_examples, use_cache)
    n = len(pairs) if num_examples is None else min(num_examples, len(pairs))

    idx, keys, tr, va, te = _kept_and_split(tok, n, max_len, holdout_duplicates, seed, (valid_fraction, test_fraction))

    src_vocab, tgt_vocab, encode = _vocabs_and_encode(tok, pairs, tr, tokenizer, min_freq, bpe_vocab_size)
    train, valid, test = encode(tr), encode(va), encode(te)
    stats = {
        "pairs_read": len(pairs),
        "malformed": read_stats.malformed,
        "pairs_used": n,
        "dropped_by_max_len": int(n - len(idx)),
        "train": len(train),
        "valid": len(valid),
        "test": len(test),
        "distinct_sources": len(set(keys)) if holdout_duplicates else None,
        "src_vocab": len(src_vocab),
        "tgt_vocab": len(tgt_vocab),
        "tokenized_cache_hit": cache_hit,
    }
    settings = {
        "data_path": str(data_path),
        "num_examples": num_examples,
        "max_len": max_len,
        "min_freq": min_freq,
        "seed": seed,
        "valid_fraction": valid_fraction,
        "test_fraction": test_fraction,
        "holdout_duplicates": holdout_duplicates,
        "tokenizer": tokenizer,
        "bpe_vocab_size": bpe_vocab_size,
    }
    return TranslationData(src_vocab, tgt_vocab, train, valid, test, stats, settings)


def load_d2l_data(
    path: str | os.PathLike | None = None,
    num_examples: int = 600,
    num_steps: int = 10,
    batch_size: int = 64,
    min_freq: int = 2,
) -> TranslationData:
    """The book's `load_data_nmt`: the first `num_examples` pairs, *all* used for training.

    Vocabularies come from all of them (min_freq=2). `data.batches()` yields the book's shapes:
    (batch_size, num_steps) tensors, each sequence + <eos> truncated or padded to num_steps.

    Our choice for the other splits: `valid` is empty and `test` holds the book's four evaluation
    pairs ("go ." -> "va !", "i lost .", "he's calm .", "i'm home ."), which also occur in training,
    exactly as the book evaluates. (The book's loop reads 601 lines for num_examples=600; we take 600.)
    """
    data = load_translation_data(
        path,
        num_examples=num_examples,
        min_freq=min_freq,
        valid_fraction=0.0,
        test_fraction=0.0,
        holdout_duplicates=False,
    )
    data.test = [Example(data.src_vocab.encode(e), data.tgt_vocab.encode(f), e, f) for e, f in BOOK_EVAL_PAIRS]
    data.stats["test"] = len(data.test)
    data.settings.update(preset="d2l", num_steps=num_steps, batch_size=batch_size)
    data.batching = {"batch_size": batch_size, "num_steps": num_steps}
    return data
