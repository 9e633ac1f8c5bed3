"""The Transformer's encoder and decoder as traceable modules, in the inputs and outputs Optimum's seq2seq
ONNX export uses, each attention's weights beside them.

    EncoderGraph(model)(input_ids, attention_mask) -> last_hidden_state, *encoder_attentions
    DecoderGraph(model)(input_ids, encoder_hidden_states, encoder_attention_mask)
        -> logits, *present (per layer: decoder.key, decoder.value, encoder.key, encoder.value),
           *decoder_attentions, *cross_attentions
    DecoderWithPastGraph(model)(input_ids, encoder_attention_mask, *past) -> logits, *present (decoder only),
           *decoder_attentions, *cross_attentions

They read the attnlab model's own parameters and compute attnlab's explicit (recorded) path with plain
tensor operations: no C kernel, KV cache object or Python loop over tokens, so `torch.onnx.export` traces
one graph for every batch size and length. Positions are computed from the inputs' lengths (the decoder
continues at the past's length); masks are True = may attend, rows that see no key get zero weights.

Shape: input_ids (B, S) or (B, T); attention masks (B, S) with 1 for real tokens; hidden states (B, S, D);
logits (B, T, V); keys and values (B, Hkv, L, Dh); weights (B, H, Lq, Lk), H and Hkv per attention module
(pruned heads are absent).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _linear(x: Tensor, lin: Any) -> Tensor:
    # The Parameters themselves: a packed or swapped projection keeps them, and F.linear traces cleanly.
    return F.linear(x, lin.weight, lin.bias)


def _positions(row: Tensor, offset: Tensor | None = None) -> Tensor:
    """(L,) int64 positions of a row's L entries, from `offset` (a 0-d int64 tensor) on; dynamic in the graph."""
    pos = torch.ones_like(row, dtype=torch.long).cumsum(0) - 1
    return pos if offset is None else pos + offset


def _sinusoids(pos: Tensor, D: int, layout: str) -> Tensor:
    """attnlab's sinusoidal_encoding of positions (L,) -> (L, D), by the same float32 operations."""
    j2 = torch.arange(0, D, 2, dtype=torch.float32)
    angles = pos.to(torch.float32)[:, None] / torch.pow(10000.0, j2 / D)  # (L, ceil(D/2))
    sin, cos = torch.sin(angles), torch.cos(angles[:, : D // 2])
    if layout == "split":
        return torch.cat([sin, cos], dim=-1)
    pairs = torch.stack([sin[:, : D // 2], cos], dim=-1).flatten(1)  # columns 2j = sin, 2j + 1 = cos
    return pairs if D % 2 == 0 else torch.cat([pairs, sin[:, D // 2 :]], dim=-1)


def embed(stack: Any, ids: Tensor, offset: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Token ids (B, L) -> (embedding * scale + positions (B, L, D), positions (L,))."""
    pos = _positions(ids[0], offset)
    x = F.embedding(ids, stack.embedding.weight) * stack.embed_scale
    pe = stack.pos_encoding
    if pe is not None:
        x = x + (F.embedding(pos, pe.embedding.weight) if pe.learned else _sinusoids(pos, pe.num_hiddens, pe.layout))
    return x, pos


def _rotate(rotary: Any, x: Tensor, pos: Tensor) -> Tensor:
    """attnlab's RotaryEmbedding.rotate at positions pos (L,): (B, H, L, Dh) -> (B, H, L, Dh)."""
    freqs = pos.to(torch.float32)[:, None] * rotary.inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    r = rotary.rot_dim
    xr = x[..., :r]
    x1, x2 = xr.chunk(2, dim=-1)
    out = xr * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()
    return out if r == rotary.head_dim else torch.cat((out, x[..., r:]), dim=-1)


def _heads(x: Tensor, heads: int, head_dim: int) -> Tensor:
    return x.reshape(x.shape[0], x.shape[1], heads, head_dim).transpose(1, 2)  # (B, H, L, Dh)


def project_kv(mha: Any, memory: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values (B, Hkv, L, Dh) of `memory` (B, L, D) through mha's W_k, W_v."""
    k = _heads(_linear(memory, mha.W_k), mha.num_kv_heads, mha.head_dim)
    v = _heads(_linear(memory, mha.W_v), mha.num_kv_heads, mha.head_dim)
    return k, v


def attend(mha: Any, x: Tensor, k: Tensor, v: Tensor, visible: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """mha's attention of queries from x (B, Lq, D) over projected keys and values (B, Hkv, Lk, Dh):
    (output (B, Lq, D), weights (B, H, Lq, Lk)); `visible` bool broadcasting to (B, H, Lq, Lk)."""
    q = _heads(_linear(x, mha.W_q), mha.num_heads, mha.head_dim)
    return attend_projected(mha, q, k, v, visible, bias)


def attend_projected(
    mha: Any, q: Tensor, k: Tensor, v: Tensor, visible: Tensor, bias: Tensor | None
) -> tuple[Tensor, Tensor]:
    """`attend` from projected queries q (B, H, Lq, Dh)."""
    if mha.groups > 1:  # each KV head serves G consecutive query heads
        k, v = k.repeat_interleave(mha.groups, dim=1), v.repeat_interleave(mha.groups, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(mha.head_dim)
    if bias is not None:
        scores = scores + bias
    empty = ~visible.any(dim=-1, keepdim=True)  # a row that sees no key: zero weights, not NaN
    weights = F.softmax(scores.masked_fill(~(visible | empty), float("-inf")), dim=-1).masked_fill(empty, 0.0)
    out = torch.matmul(weights, v).transpose(1, 2)  # (B, Lq, H, Dh)
    out = out.reshape(out.shape[0], out.shape[1], mha.num_heads * mha.head_dim)
    return _linear(out, mha.W_o), weights


def position_bias(stack: Any, mha: Any, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
    """The stack's ALiBi or T5 bias (1, H, Lq, Lk) for mha's heads, or None for other schemes."""
    if stack.relative_bias is None:
        return None
    bias = stack.relative_bias(q_pos, k_pos)
    if bias.shape[1] != mha.num_heads:  # pruned heads: the rows of the heads left
        bias = bias[:, torch.tensor(mha.kept_heads, dtype=torch.long)]
    return bias


def sublayer(addnorm: Any, x: Tensor, fn) -> Tensor:
    """Post-norm ln(x + fn(x)) or pre-norm x + fn(ln(x)) (`attnlab.models.transformer_layers.Sublayer`)."""
    ln = addnorm.ln
    if addnorm.norm_first:
        return x + fn(F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps))
    return F.layer_norm(x + fn(x), ln.normalized_shape, ln.weight, ln.bias, ln.eps)


def ffn(block_ffn: Any, x: Tensor) -> Tensor:
    return _linear(block_ffn.activation(_linear(x, block_ffn.dense1)), block_ffn.dense2)


def final_norm(stack: Any, x: Tensor) -> Tensor:
    ln = stack.final_norm
    if isinstance(ln, nn.LayerNorm):
        return F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)
    return x


class EncoderGraph(nn.Module):
    """(input_ids (B, S), attention_mask (B, S)) -> (last_hidden_state (B, S, D), N weights (B, H, S, S))."""

    def __init__(self, model: Any):
        super().__init__()
        self.stack = model.encoder

    def forward(self, input_ids: Tensor, attention_mask: Tensor):
        stack = self.stack
        x, pos = embed(stack, input_ids)
        visible = (attention_mask > 0)[:, None, None, :]  # (B, 1, 1, S)
        weights = []
        for block in stack.blocks:
            mha = block.attention
            if mha.window is not None:  # local attention: |i - j| <= window
                visible_b = visible & ((pos[:, None] - pos[None, :]).abs() <= mha.window)
            else:
                visible_b = visible

            def self_attention(h: Tensor, mha=mha, visible_b=visible_b) -> Tensor:
                q = _heads(_linear(h, mha.W_q), mha.num_heads, mha.head_dim)
                k, v = project_kv(mha, h)
                if stack.rotary is not None:
                    q, k = _rotate(stack.rotary, q, pos), _rotate(stack.rotary, k, pos)
                out, w = attend_projected(mha, q, k, v, visible_b, position_bias(stack, mha, pos, pos))
                weights.append(w)
                return out

            x = sublayer(block.addnorm1, x, self_attention)
            x = sublayer(block.addnorm2, x, lambda h, block=block: ffn(block.ffn, h))
        return (final_norm(stack, x), *weights)


class _DecoderSteps(nn.Module):
    """What both decoder graphs compute: the blocks over new tokens, given each layer's cross keys/values
    and the self-attention past (or none)."""

    suppress: Tensor | None

    def __init__(self, model: Any):
        super().__init__()
        self.stack = model.decoder
        suppress = torch.zeros(model.config.tgt_vocab_size)
        suppress[list(model.config.suppress_tokens)] = float("-inf")  # tokens attnlab never emits
        self.register_buffer("suppress", suppress if model.config.suppress_tokens else None, persistent=False)

    def run(self, input_ids: Tensor, encoder_attention_mask: Tensor, cross_kv, past) -> tuple:
        stack = self.stack
        offset = None if past is None else torch.ones_like(past[0][0][0, 0, :, 0], dtype=torch.long).sum()
        x, q_pos = embed(stack, input_ids, offset)
        k_pos = q_pos if past is None else torch.cat([_positions(past[0][0][0, 0, :, 0]), q_pos])
        causal = (k_pos[None, :] <= q_pos[:, None])[None, None]  # (1, 1, T, past + T)
        enc_visible = (encoder_attention_mask > 0)[:, None, None, :]  # (B, 1, 1, S)
        presents, self_w, cross_w = [], [], []
        for i, block in enumerate(stack.blocks):
            mha = block.self_attention

            def self_attention(h: Tensor, i=i, mha=mha) -> Tensor:
                q = _heads(_linear(h, mha.W_q), mha.num_heads, mha.head_dim)
                k, v = project_kv(mha, h)
                if stack.rotary is not None:
                    q, k = _rotate(stack.rotary, q, q_pos), _rotate(stack.rotary, k, q_pos)
                if past is not None:
                    k, v = torch.cat([past[i][0], k], dim=2), torch.cat([past[i][1], v], dim=2)
                presents.append((k, v))
                out, w = attend_projected(mha, q, k, v, causal, position_bias(stack, mha, q_pos, k_pos))
                self_w.append(w)
                return out

            def cross_attention(h: Tensor, i=i, block=block) -> Tensor:
                k, v = cross_kv[i]
                out, w = attend(block.cross_attention, h, k, v, enc_visible, None)
                cross_w.append(w)
                return out

            x = sublayer(block.addnorm1, x, self_attention)
            x = sublayer(block.addnorm2, x, cross_attention)
            x = sublayer(block.addnorm3, x, lambda h, block=block: ffn(block.ffn, h))
        logits = _linear(final_norm(stack, x), stack.dense)
        if self.suppress is not None:
            logits = logits + self.suppress
        return logits, presents, self_w, cross_w


class DecoderGraph(_DecoderSteps):
    """The first step (or a teacher-forced pass) over target tokens, projecting the encoder's keys/values:
    (input_ids (B, T), encoder_hidden_states (B, S, D), encoder_attention_mask (B, S)) -> logits (B, T, V),
    per layer present decoder.key/.value (B, Hkv, T, Dh) and encoder.key/.value (B, Hkv, S, Dh), then N
    decoder self weights (B, H, T, T) and N cross weights (B, H, T, S)."""

    def forward(self, input_ids: Tensor, encoder_hidden_states: Tensor, encoder_attention_mask: Tensor):
        cross_kv = [project_kv(b.cross_attention, encoder_hidden_states) for b in self.stack.blocks]
        logits, presents, self_w, cross_w = self.run(input_ids, encoder_attention_mask, cross_kv, None)
        flat = [t for (k, v), (ck, cv) in zip(presents, cross_kv) for t in (k, v, ck, cv)]
        return (logits, *flat, *self_w, *cross_w)


class DecoderWithPastGraph(_DecoderSteps):
    """Later steps: (input_ids (B, t), encoder_attention_mask (B, S), per layer past decoder.key/.value
    (B, Hkv, P, Dh) and encoder.key/.value (B, Hkv, S, Dh)) -> logits (B, t, V), per layer present
    decoder.key/.value (B, Hkv, P + t, Dh), N self weights (B, H, t, P + t), N cross weights (B, H, t, S)."""

    def forward(self, input_ids: Tensor, encoder_attention_mask: Tensor, *past_key_values: Tensor):
        n = len(self.stack.blocks)
        if len(past_key_values) != 4 * n:
            raise ValueError(f"expected {4 * n} past tensors (4 per layer), got {len(past_key_values)}")
        groups = [past_key_values[4 * i : 4 * i + 4] for i in range(n)]
        past = [(g[0], g[1]) for g in groups]
        cross_kv = [(g[2], g[3]) for g in groups]
        logits, presents, self_w, cross_w = self.run(input_ids, encoder_attention_mask, cross_kv, past)
        return (logits, *[t for kv in presents for t in kv], *self_w, *cross_w)


__all__ = ["DecoderGraph", "DecoderWithPastGraph", "EncoderGraph", "embed"]
