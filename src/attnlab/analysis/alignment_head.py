"""Which cross-attention head aligns words: the measurable choice `attnlab heads` saves as RUN/alignment.json,
the default of `translate --align`, the explorer's alignment and the CTranslate2 export's alignment heads.

    scores = word_confidence(model, batches, src_vocab, tgt_vocab)   # {cross module: [per head]}
    choice = choose_alignment(model, scores)                         # {"layer": 0, "heads": [2], "score": ...}

Word confidence of a head: the mean, over real target tokens (teacher forcing; not <eos>, not padding),
of the largest weight the head puts on a real source token (not <eos>, not padding). Voita et al.'s
confidence counts a head that parks its weight on the source <eos> (an attention sink) as confident;
leaving <eos> out keeps only confident attention to words, which is what a word alignment reads (its
argmax skips <eos> too). The (layer, head) with the highest word confidence is chosen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

from attnlab.attention import record_attention

__all__ = ["CRITERION", "choose_alignment", "word_confidence"]

CRITERION = (
    "word confidence: mean over real target tokens (not <eos>/padding) of the head's largest cross-attention "
    "weight on a real source token (not <eos>/padding); the highest is chosen"
)


@torch.no_grad()
def word_confidence(model: nn.Module, batches: Sequence, src_vocab, tgt_vocab) -> dict[str, list[float]]:
    """{cross-attention module name: [word confidence per head]} over the teacher-forced batches (module
    docstring), in the decoder's layer order.

    Examples:
        >>> from attnlab.data import Example, Vocab, iterate_batches
        >>> from attnlab.models import Transformer, TransformerConfig
        >>> v = Vocab([["a", "b"]], min_freq=1)
        >>> _ = torch.manual_seed(0)
        >>> m = Transformer(TransformerConfig(len(v), len(v), 8, 2, 2, 16, dropout=0.0)).eval()
        >>> ex = [Example(v.encode("a b"), v.encode("b a"), "a b", "b a")]
        >>> s = word_confidence(m, list(iterate_batches(ex, v, v, batch_size=1, shuffle=False)), v, v)
        >>> list(s), len(s["decoder.blocks.0.cross_attention"])
        (['decoder.blocks.0.cross_attention', 'decoder.blocks.1.cross_attention'], 2)
    """
    model.eval()
    cross = _cross_names(model)
    sums: dict[str, torch.Tensor] = {}
    count = 0.0
    for batch in batches:
        with record_attention(model) as rec:
            model(batch.src, batch.tgt_in, batch.src_valid_lens)
        S, T = batch.src.shape[1], batch.tgt_out.shape[1]
        keys = (torch.arange(S)[None, :] < batch.src_valid_lens[:, None]) & (batch.src != src_vocab.eos)  # (B, S)
        real = (torch.arange(T)[None, :] < batch.tgt_valid_lens[:, None]) & (batch.tgt_out != tgt_vocab.eos)
        real = real & (batch.tgt_out != tgt_vocab.pad)  # (B, T): queries producing a real target token
        for name in cross:
            W = rec.weights[name][0].double()  # (B, H, T, S)
            top = W.masked_fill(~keys[:, None, None, :], 0.0).max(dim=-1).values  # (B, H, T)
            acc = sums.setdefault(name, torch.zeros(W.shape[1], dtype=torch.float64))
            acc += (top * real[:, None, :]).sum(dim=(0, 2))
        count += float(real.sum())
    return {name: (v / max(count, 1.0)).tolist() for name, v in sums.items()}


def _cross_names(model: nn.Module) -> list[str]:
    """The qualified names of the model's cross-attention modules, in decoder layer order."""
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(m)] for m in cast(Any, model).attention_kinds().get("cross", [])]


def choose_alignment(model: nn.Module, scores: Mapping[str, Sequence[float]]) -> dict | None:
    """{"layer": L, "heads": [h], "criterion": CRITERION, "score": s}: the decoder layer and head (its index
    in that module as it is now, pruned heads gone) with the highest score, the first such in layer order;
    None when no cross-attention head was scored (no cross-attention, or every head pruned)."""
    cross = _cross_names(model)
    best: tuple[float, int, int] | None = None
    for layer, name in enumerate(cross):
        for h, s in enumerate(scores.get(name, [])):
            if best is None or s > best[0]:
                best = (float(s), layer, h)
    if best is None:
        return None
    return {"layer": best[1], "heads": [best[2]], "criterion": CRITERION, "score": best[0]}
