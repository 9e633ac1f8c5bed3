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
from typing import Sequence


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
        label_counts = Counter(tuple(label_tokens[i:i + n]) for i in range(len_label - n + 1))
        pred_counts = Counter(tuple(pred_tokens[i:i + n]) for i in range(len_pred - n + 1))
        # Clipped matches: an n-gram counts at most as often as it occurs in the label (the book's
        # decrement-a-dict loop computes exactly this).
        matches = sum(min(c, label_counts[g]) for g, c in pred_counts.items())
        score *= math.pow(matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


def _check_pair(hyps: Sequence[str], refs: Sequence[str], name: str) -> None:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise ValueError(f"{name} expects lists of sentences, got a single string")
    if len(hyps) != len(refs):
        raise ValueError(f"{name}: {len(hyps)} hypotheses but {len(refs)} references; they must pair up")


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """sacreBLEU corpus BLEU (0-100, its default 13a tokenizer) of detokenized hypotheses vs references."""
    import sacrebleu

    _check_pair(hyps, refs, "corpus_bleu")
    if not hyps:
        return 0.0
    return float(sacrebleu.corpus_bleu(list(hyps), [list(refs)]).score)


def corpus_chrf(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """sacreBLEU corpus chrF (0-100) of detokenized hypotheses vs references."""
    import sacrebleu

    _check_pair(hyps, refs, "corpus_chrf")
    if not hyps:
        return 0.0
    return float(sacrebleu.corpus_chrf(list(hyps), [list(refs)]).score)


__all__ = ["bleu", "corpus_bleu", "corpus_chrf"]
