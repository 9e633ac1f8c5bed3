"""Translation scores: the book's per-sentence BLEU, and corpus BLEU / chrF through sacreBLEU.

`bleu` is *Dive into Deep Learning*'s formula, kept exactly so the chapter's numbers reproduce:

    BLEU = exp(min(0, 1 - len_label / len_pred)) * prod_{n=1..k} p_n ** (1 / 2**n)

where p_n is the clipped n-gram precision. Edge cases, decided here (the book's code divides by zero
or silently scores garbage on them):

- n-gram orders longer than the prediction (n > len_pred) are *skipped*, as in the book's loop
  `range(1, min(k, len_pred) + 1)`: a one-token prediction has no bigrams to be right or wrong about,
  and the brevity penalty already charges it for being short. So `bleu('va', 'va', k=2) == 1.0`.
- an order the prediction has but the label lacks (len_label < n <= len_pred) has precision 0 -> 0.0.
- an empty (or whitespace-only) prediction scores 0.0 (the book's `1 - len_label / 0` would raise).
- an empty label is a caller error -> ValueError.

Corpus scores are sacreBLEU's, on *detokenized* text (`attnlab.data.detokenize`), the way published
numbers are computed; they are on sacreBLEU's 0-100 scale.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import sacrebleu

from attnlab.data import BOOK_EVAL_PAIRS, detokenize, tokenize


def bleu(pred: str, label: str, k: int) -> float:
    """The book's BLEU of one space-tokenized prediction against one label, in [0, 1].

    Args:
        pred, label: token strings separated by spaces, e.g. "il est calme ."
        k: the longest n-gram order (the book uses k=2 for its four example sentences).
    """
    if k < 1:
        raise ValueError(f"bleu: k (the longest n-gram order) must be >= 1, got {k}")
    pred_tokens, label_tokens = pred.split(), label.split()
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    if len_label == 0:
        raise ValueError("bleu: the label is empty; pass the reference translation as a token string")
    if len_pred == 0:
        return 0.0
    score = math.exp(min(0.0, 1.0 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        label_counts = Counter(tuple(label_tokens[i : i + n]) for i in range(len_label - n + 1))
        pred_counts = Counter(tuple(pred_tokens[i : i + n]) for i in range(len_pred - n + 1))
        # Clipped matches: an n-gram counts at most as often as it occurs in the label (the book's
        # decrement-a-dict loop computes exactly this).
        matches = sum(min(c, label_counts[g]) for g, c in pred_counts.items())
        score *= math.pow(matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


Refs = Sequence[str] | Sequence[Sequence[str]]  # one reference per hypothesis, or a list of them each


def _streams(hyps: Sequence[str], refs: Refs, name: str) -> list[list[str | None]]:
    """sacreBLEU's reference streams: stream j holds each hypothesis' j-th reference (None past its last)."""
    if isinstance(hyps, str) or isinstance(refs, str):
        raise ValueError(f"{name} expects lists of sentences, got a single string")
    if len(hyps) != len(refs):
        raise ValueError(f"{name}: {len(hyps)} hypotheses but {len(refs)} references; they must pair up")
    per_hyp = [[r] if isinstance(r, str) else list(r) for r in refs]
    for i, rs in enumerate(per_hyp):
        if not rs or not all(isinstance(r, str) for r in rs):
            raise ValueError(f"{name}: hypothesis {i} has no reference strings (got {refs[i]!r})")
    width = max((len(rs) for rs in per_hyp), default=1)
    return [[rs[j] if j < len(rs) else None for rs in per_hyp] for j in range(width)]


def corpus_bleu(hyps: Sequence[str], refs: Refs) -> float:
    """sacreBLEU corpus BLEU (0-100, its default 13a tokenizer) of detokenized hypotheses vs references.

    refs: one reference string per hypothesis, or a list of references per hypothesis (multi-reference
    BLEU: an n-gram counts if any reference has it; the closest reference length sets the brevity penalty).

    Examples:
        >>> corpus_bleu(["il est calme ."], [["il est tranquille .", "il est calme ."]])
        100.0
    """
    streams = _streams(hyps, refs, "corpus_bleu")
    if not hyps:
        return 0.0
    # A None reference is sacreBLEU's documented way to give sentences fewer references; its hint omits it.
    return round(float(sacrebleu.corpus_bleu(list(hyps), streams).score), 10)  # type: ignore[arg-type]


def corpus_chrf(hyps: Sequence[str], refs: Refs) -> float:
    """sacreBLEU corpus chrF (0-100) of detokenized hypotheses vs one or several references each."""
    streams = _streams(hyps, refs, "corpus_chrf")
    if not hyps:
        return 0.0
    return round(float(sacrebleu.corpus_chrf(list(hyps), streams).score), 10)  # type: ignore[arg-type]


def reference_text(text: str, vocab) -> str:
    """A corpus sentence in the form decoded hypotheses take (the book's lowercased tokenization,
    detokenized with the vocabulary's language rules), so BLEU compares like with like."""

    if hasattr(vocab, "reference_text"):  # vocabularies with their own normalization (other languages)
        return vocab.reference_text(text)
    return detokenize(tokenize(text), lang=getattr(vocab, "lang", None))


def group_by_source(examples: Sequence) -> tuple[list, list[list[str]]]:
    """Examples (with .src_text, .tgt_text) -> (one example per distinct source, in first-seen order;
    for each, the target texts of every example with that source). The corpus gives many sentences
    several translations ("go ." -> "va !", "marche .", "bouge !"): a model is scored against all of
    them, as sacreBLEU's multi-reference BLEU does, instead of against one picked by the split."""
    firsts: dict[str, int] = {}
    sources: list = []
    refs: list[list[str]] = []
    for ex in examples:
        i = firsts.get(ex.src_text)
        if i is None:
            firsts[ex.src_text] = len(sources)
            sources.append(ex)
            refs.append([ex.tgt_text])
        elif ex.tgt_text not in refs[i]:
            refs[i].append(ex.tgt_text)
    return sources, refs


LENGTH_BUCKETS = ((1, 4), (5, 7), (8, 10), (11, None))  # source words, inclusive; None = no upper bound


def bucket_name(lo: int, hi: int | None) -> str:
    return f"{lo}-{hi}" if hi is not None else f"{lo}+"


def scores_by_length(sources: Sequence[str], hyps: Sequence[str], refs: Refs, buckets=LENGTH_BUCKETS) -> list[dict]:
    """Corpus BLEU and chrF per bucket of source length in words (1-4, 5-7, 8-10, 11+ by default):
    [{"bucket", "sentences", "bleu", "chrf"}], empty buckets included with None scores."""
    if not (len(sources) == len(hyps) == len(refs)):
        raise ValueError(
            f"scores_by_length: {len(sources)} sources, {len(hyps)} hypotheses and {len(refs)} references must pair up"
        )
    rows = []
    for lo, hi in buckets:
        idx = [i for i, s in enumerate(sources) if lo <= len(s.split()) and (hi is None or len(s.split()) <= hi)]
        h, r = [hyps[i] for i in idx], [refs[i] for i in idx]
        rows.append(
            {
                "bucket": bucket_name(lo, hi),
                "sentences": len(idx),
                "bleu": corpus_bleu(h, r) if idx else None,
                "chrf": corpus_chrf(h, r) if idx else None,
            }
        )
    return rows


def book_bleu(translator, options=None) -> list[tuple[str, str, float]]:
    """(source, translation, BLEU k=2) for the book's four sentences, the book's way (space tokens), decoded
    with `options` (a DecodeOptions; default: the translator's defaults).

    The demo's table and `attnlab evaluate` both use this one function."""

    outs = translator.translate([src for src, _ in BOOK_EVAL_PAIRS], options=options)
    return [
        (src, out, bleu(" ".join(tokenize(out)), " ".join(tokenize(ref)), k=2))
        for (src, ref), out in zip(BOOK_EVAL_PAIRS, outs)
    ]


__all__ = [
    "LENGTH_BUCKETS",
    "bleu",
    "book_bleu",
    "corpus_bleu",
    "corpus_chrf",
    "group_by_source",
    "reference_text",
    "scores_by_length",
]
