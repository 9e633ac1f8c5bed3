"""A greedy decoding step of the Transformer's decoder in few calls: the same kernels and arithmetic as
the modules' own forward, without their per-call Python (module calls, checks, path choices, lambdas).

    step = DecoderStep.build(decoder)     -> None where the decoder is not one it covers (or inside `off()`)
    step.covers(state)                    -> whether this step of this state can run here
    step(tgt (n, 1), state)               -> logits (n, 1, V), the caches updated as the modules do

At a decoding step of the `laptop` model about 290 PyTorch and C calls go through some 700 lines of
module code; the arithmetic is a few dozen of them. With int8's C passes that Python was ~40% of a step
(BENCHMARKS.md, "Precision"). The step here runs what the modules would run for one new token per row
(post- or pre-norm blocks, sinusoidal or learned positions, any grouped-query layout, each linear as
itself), so its logits are the modules' bit for bit (`tests/models/test_decoder_step.py`); anything else
(beams, rotary or relative positions, recording, head masks, hooks, autograd) takes the modules' path.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.nn.modules import module as torch_module

from attnlab.attention import MultiHeadAttention
from attnlab.attention.cache import KVCache, _all_finite
from attnlab.attention.heads import head_masks_active
from attnlab.attention.steps import native_few_queries
from attnlab.utils.packed import is_float_linear, linear

from .transformer_layers import (
    PositionWiseFFN,
    Sublayer,
    TransformerDecoder,
    TransformerDecoderBlock,
    add_layer_norm,
)

__all__ = ["DecoderStep", "active", "off", "unwatched"]

_off = 0  # > 0 inside `off()`
_off_lock = threading.Lock()


@contextlib.contextmanager
def off() -> Iterator[None]:
    """Inside the block, decoding states opened get no lean step: every step runs the modules (benchmarks
    measure what the lean steps give, as `attnlab.utils.native.off` does for the C kernels)."""
    global _off
    with _off_lock:
        _off += 1
    try:
        yield
    finally:
        with _off_lock:
            _off -= 1


def active() -> bool:
    """Whether decoding states opened now get a lean step where one covers the model (not inside `off()`)."""
    return not _off


class DecoderStep:
    """One token per row through `decoder`'s blocks against filled caches (see the module docstring)."""

    def __init__(self, decoder: TransformerDecoder):
        self.decoder = decoder
        self.blocks: list[TransformerDecoderBlock] = [
            b for b in decoder.blocks if isinstance(b, TransformerDecoderBlock)
        ]
        self.modules = list(decoder.modules())

    @classmethod
    def build(cls, decoder: nn.Module) -> DecoderStep | None:
        """The step for `decoder`, or None where it is not a decoder this step covers (or inside `off()`)."""
        if _off:
            return None
        if type(decoder) is not TransformerDecoder or decoder.pos_encoding is None or decoder.relative_bias is not None:
            return None
        for block in decoder.blocks:
            if type(block) is not TransformerDecoderBlock or type(block.ffn) is not PositionWiseFFN:
                return None
            for sub in (block.addnorm1, block.addnorm2, block.addnorm3):
                if type(sub) is not Sublayer or type(sub.ln) is not nn.LayerNorm:
                    return None
            for mha in (block.self_attention, block.cross_attention):
                if type(mha) is not MultiHeadAttention or mha.rotary is not None or mha.window is not None:
                    return None
                if mha.num_heads == 0:
                    return None
        return cls(decoder)

    def covers(self, state) -> bool:
        """Whether this step of `state` runs here: caches already filled (the first step projects the memory
        on the modules' path) and nothing in the way (`unwatched`)."""
        if not self.unwatched(state):
            return False
        self_cache, cross_cache = state.caches[0]
        return self_cache.k is not None and cross_cache.k is not None

    def unwatched(self, state) -> bool:
        """One row per sentence, and nothing in the modules' way (`unwatched`)."""
        return state.beam == 1 and bool(state.caches) and unwatched(self.modules)

    def __call__(self, tgt: Tensor, state) -> Tensor:
        dec = self.decoder
        X = dec.embed(tgt, state.offset)  # (n, 1, D)
        lens = state.src_valid_lens
        for block, (self_cache, cross_cache) in zip(self.blocks, state.caches):
            X = _residual(block.addnorm1, X, _self_attention, block.self_attention, self_cache)
            X = _residual(block.addnorm2, X, _cross_attention, block.cross_attention, cross_cache, lens)
            X = _residual(block.addnorm3, X, PositionWiseFFN.forward, block.ffn)
        X = dec.final_norm(X)
        return dec.dense.forward(X)


def _residual(sub: Sublayer, X: Tensor, f, module: nn.Module, *args) -> Tensor:
    """`Sublayer.forward` in eval mode with the sublayer g(x) = f(module, x, *args): LayerNorm(X + g(X)) (a C
    pass where it runs), or X + g(LayerNorm(X))."""
    if sub.norm_first:
        return X + f(module, sub.ln(X), *args)
    Y = f(module, X, *args)
    out = add_layer_norm(X, Y, sub.ln)
    return sub.ln(X + Y) if out is None else out


def _self_attention(mha: MultiHeadAttention, x: Tensor, cache: KVCache) -> Tensor:
    """`MultiHeadAttention.forward(x, x, x, cache=cache)` for one query per row (causal: it sees every key)."""
    fused = getattr(mha, "W_qkv", None)
    if all(is_float_linear(m) for m in (mha.W_q, mha.W_k, mha.W_v)):
        qkv = linear(x, *mha._qkv_weight())
    elif isinstance(fused, nn.Module):
        qkv = fused(x)
    else:
        qkv = None
    if qkv is None:
        q, k, v = mha.W_q(x), mha.W_k(x), mha.W_v(x)
    else:
        q, k, v = qkv.split(mha._qkv_sizes(), dim=-1)
    q, k, v = mha._split(q), mha._split(k, mha.num_kv_heads), mha._split(v, mha.num_kv_heads)
    k, v = cache.update(k, v)
    return _attend(mha, q, k, v, cache, None, True)


def _cross_attention(mha: MultiHeadAttention, x: Tensor, cache: KVCache, lens: Tensor | None) -> Tensor:
    """`MultiHeadAttention.forward(x, memory, memory, lens, cache=cache)` against a filled static cache."""
    q = mha._split(mha.W_q.forward(x))
    return _attend(mha, q, cache.k, cache.v, cache, lens, False)


def _attend(mha: MultiHeadAttention, q, k, v, cache: KVCache, lens, causal: bool) -> Tensor:
    B = q.shape[0]
    if _all_finite(q) and cache.finite:
        out = native_few_queries(q, k, v, lens, mha.groups)
        if out is None:
            out = mha._attend(q, k, v, lens, None, causal, cache)
    else:
        out = mha._attend_nonfinite(q, k, v, lens, None, causal)
    out = out.transpose(1, 2).reshape(B, 1, mha.num_heads * mha.head_dim)
    return mha.W_o.forward(out)


def unwatched(modules: list[nn.Module]) -> bool:
    """Whether a fused pass may stand in for these modules' forward: eval mode, no autograd, and nothing
    watching them that their forward would serve (recording, head masks, forward hooks)."""
    if torch.is_grad_enabled() or head_masks_active() or _global_hooks():
        return False
    for m in modules:
        if (
            m.training
            or m._forward_hooks
            or m._forward_pre_hooks
            or (isinstance(m, MultiHeadAttention) and m.recording)
        ):
            return False
    return True


def _global_hooks() -> bool:
    """Whether a forward hook is registered for every module (`nn.modules.module.register_module_forward_hook`)."""
    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)
