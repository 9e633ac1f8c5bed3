"""Attention: scores -> weights -> pooled values, masks, caches and positions. Nothing here imports from
`attnlab.models`; a decoding step's C passes are `attnlab.kernels`."""

from .backends import flash_attention, masked_attention
from .dropout import Dropout, dropout_keep_mask
from .heads import attention_modules, check_head_mask, head_masks_from_indices, mask_heads, prune_heads
from .masking import build_mask, causal_mask, lengths_to_mask, masked_softmax, sequence_mask, window_mask
from .multihead import KVCache, MultiHeadAttention, PositionBias
from .online import OnlineSoftmaxState, online_softmax_attention, online_softmax_steps
from .positions import (
    AlibiBias,
    PositionalEncoding,
    PositionScheme,
    RotaryEmbedding,
    T5RelativeBias,
    alibi_slopes,
    get_scheme,
    half_split_permutation,
    rotate_half,
    sinusoidal_encoding,
    t5_relative_bucket,
)
from .recording import ATTENTION_KINDS, AttentionRecording, record_attention
from .scoring import AdditiveAttention, DotProductAttention, MultiplicativeAttention, attend

__all__ = [
    "ATTENTION_KINDS",
    "AlibiBias",
    "OnlineSoftmaxState",
    "PositionBias",
    "PositionScheme",
    "get_scheme",
    "RotaryEmbedding",
    "T5RelativeBias",
    "alibi_slopes",
    "half_split_permutation",
    "online_softmax_attention",
    "online_softmax_steps",
    "rotate_half",
    "t5_relative_bucket",
    "AdditiveAttention",
    "AttentionRecording",
    "DotProductAttention",
    "Dropout",
    "KVCache",
    "MultiHeadAttention",
    "MultiplicativeAttention",
    "PositionalEncoding",
    "attend",
    "flash_attention",
    "masked_attention",
    "attention_modules",
    "check_head_mask",
    "head_masks_from_indices",
    "mask_heads",
    "prune_heads",
    "build_mask",
    "causal_mask",
    "dropout_keep_mask",
    "lengths_to_mask",
    "masked_softmax",
    "record_attention",
    "sequence_mask",
    "sinusoidal_encoding",
    "window_mask",
]
