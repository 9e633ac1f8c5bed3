"""How many attention weights one explanation prints, per model type (for the explorer's response bound).

    attention_numbers(translator, Ls, Lt)   # weights in the JSON of one /api/translate answer

The maps are those `analysis.explain` returns: the Transformer's N encoder self (Ls x Ls), N decoder
self (Lt x Lt) and N cross (Lt x Ls) per head; the decoder-only translator's N-block self-attention cut
into the same three views (the source rows over the source, the target rows over the target and over
the source: the target-over-source block is counted once, as cross); the Bahdanau model's one additive
attention, cross only.
"""

from __future__ import annotations

# model types whose maps are N layers x H heads x (Ls² + Lt² + Lt·Ls)
THREE_VIEWS = ("transformer", "decoder-only")


def attention_numbers(translator, src_len: int, tgt_len: int) -> int:
    """Weights printed for a source of `src_len` tokens and `tgt_len` decoder positions."""
    m = translator.config.get("model", {})
    Ls, Lt = src_len, tgt_len
    if translator.config.get("model_type", "transformer") in THREE_VIEWS:
        return int(m.get("num_layers", 1)) * int(m.get("num_heads", 1)) * (Ls * Ls + Lt * Lt + Lt * Ls)
    return Lt * Ls


__all__ = ["THREE_VIEWS", "attention_numbers"]
