"""Model FLOPs of a training step of the encoder–decoder Transformer, for MFU (model FLOPs utilisation).

    flops = 6 x (matmul parameters x the tokens that pass them) + attention's score and value products x 3

The usual 6 x parameters x tokens (2 for the forward multiply-add, 4 for the backward), counted per stack:
encoder weights over the real source tokens, decoder weights and the output layer over the real target
tokens (embedding lookups are no matmul). Attention adds 2 products of 2 x Lq x Lk x D per layer, times 3 for
forward and backward, over each sentence's real lengths: encoder self (S x S), decoder self (causal: the
T(T+1)/2 visible pairs) and cross (T x S). Padding is not counted: it is work, not model FLOPs.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["transformer_step_flops"]


def transformer_step_flops(
    d: int, ffn: int, layers: int, vocab: int, src_lens: Sequence[int], tgt_lens: Sequence[int]
) -> float:
    """Model FLOPs of one training step (forward + backward) over sentences of these real lengths.

    Args:
        d, ffn, layers, vocab: model width, FFN width, blocks per stack, target vocabulary.
        src_lens, tgt_lens: each sentence's real source and target tokens.

    Examples:
        >>> transformer_step_flops(4, 8, 1, 10, [2], [1])  # 6*(128*2 + (192 + 40)*1) + 12*4*(4 + 1 + 2)
        3264.0
    """
    enc = 4 * d * d + 2 * d * ffn  # Q, K, V, O + the FFN's two matrices
    dec = 8 * d * d + 2 * d * ffn  # self- and cross-attention + the FFN
    s_tok, t_tok = float(sum(src_lens)), float(sum(tgt_lens))
    dense = 6.0 * (layers * enc * s_tok + (layers * dec + d * vocab) * t_tok)
    pairs = sum(s * s + t * (t + 1) / 2 + t * s for s, t in zip(src_lens, tgt_lens))
    return dense + 12.0 * d * layers * pairs
