"""Subwords -> words: SentencePiece pieces grouped into words, and attention maps merged to match
(keys summed over a word's pieces, queries averaged), as the explorer and `merge_subwords` show them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from attnlab.analysis.explanation import Explanation

# --------------------------------------------------------------------------- subwords -> words
WORD_START = "▁"  # SentencePiece's mark of a piece that begins a word


def word_groups(tokens: Sequence[str]) -> list[list[int]]:
    """Indices of the pieces of each word: a word starts at a piece beginning with "▁", at a special
    token (<eos>, </s>, <unk>, ...) and right after one; other pieces continue the word before."""
    groups: list[list[int]] = []
    prev_special = True
    for i, t in enumerate(tokens):
        special = t.startswith("<") and t.endswith(">")
        if special or prev_special or t.startswith(WORD_START) or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
        prev_special = special
    return groups


def _word(tokens: Sequence[str], group: list[int]) -> str:
    return "".join(tokens[i] for i in group).replace(WORD_START, "") or tokens[group[0]]


def _pool(groups: list[list[int]], n: int, average: bool) -> Tensor:
    """(words, n) matrix that sums (average=False) or averages a token axis over each word's pieces."""
    G = torch.zeros(len(groups), n)
    for w, idx in enumerate(groups):
        G[w, idx] = 1.0 / len(idx) if average else 1.0
    return G


def merge_maps(W: Tensor, q_groups: list[list[int]], k_groups: list[list[int]]) -> Tensor:
    """Merge one kind's maps (..., Lq, Lk) into words: (..., Wq, Wk).

    Keys are summed over a word's pieces (the attention the word received), queries averaged (each
    piece's distribution counts equally), so rows that summed to 1 still do.
    """
    Gq = _pool(q_groups, W.shape[-2], average=True).to(W.dtype)
    Gk = _pool(k_groups, W.shape[-1], average=False).to(W.dtype)
    return Gq @ W @ Gk.T


def merge_subwords(exp: Explanation) -> Explanation:
    """The same explanation over words instead of SentencePiece pieces (`merge_maps` on every kind).
    An explanation of word-level tokens (`exp.subwords` False) comes back unchanged."""
    if not exp.subwords or exp.merged:
        return exp
    src, tgt, tin = (word_groups(t) for t in (exp.src_tokens, exp.tgt_tokens, exp.tgt_input_tokens))
    axes = {"encoder_self": (src, src), "decoder_self": (tgt, tin), "cross": (tgt, src)}
    maps = {kind: merge_maps(W, *axes[kind]) for kind, W in exp.maps.items()}
    return replace(
        exp,
        maps=maps,
        merged=True,
        src_tokens=[_word(exp.src_tokens, g) for g in src],
        tgt_tokens=[_word(exp.tgt_tokens, g) for g in tgt],
        tgt_input_tokens=[_word(exp.tgt_input_tokens, g) for g in tin],
    )
