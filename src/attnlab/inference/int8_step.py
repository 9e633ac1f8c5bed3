"""int8 decoding's step (`--precision int8`) as int8 matmuls with one C pass between each two
(`csrc/int8_step.c`): a few dozen calls per step of a small decoder instead of the modules' hundreds, for
greedy decoding and for every hypothesis of a beam alike.

    step = Int8DecoderStep.build(decoder)  -> None inside `off()` or without the C passes (`kernels.int8_step`)
    step.covers(state)                     -> whether this step of this state runs here
    step(tgt (n, 1), state)                -> logits (n, 1, V), the caches updated as the modules do

    x, (q, s) = embed(tokens)                              fp32 rows and their int8 rows and scales
    per decoder block:
        q, s = attention(int_mm(q, W_qkv))                 the new key/value into the cache, then attention
        x, (q, s) = add_ln(int_mm(q, W_o), x)              LayerNorm(x + W_o o)
        q, s = attention(int_mm(q, W_q'), cross cache)     cross-attention over the source
        x, (q, s) = add_ln(int_mm(q, W_o'), x)
        q, s = relu(int_mm(q, W_1)); x, (q, s) = add_ln(int_mm(q, W_2), x)
    logits = dequantize(int_mm(q, W_dense))

Beam states (`TransformerState.beam` = K > 1, `Transformer.expand_beams`): the n = B * K rows are the K
hypotheses of each of B sentences; the memory and the cross-attention keys and values stay at B rows,
computed once per sentence, and each row's query reads its sentence's keys where they lie (the kernel's
`fold`), never a copy per hypothesis. The model's `reorder_state` (the hypotheses' parents, sentences that
are done leaving the batch) copies no cache for this step: it keeps, per row, the cache row of each earlier
step (`TransformerState.ancestry`), and the kernel reads each row's keys through it; the caches are laid out
again (`attnlab.kernels.gather_rows`) only where the modules take a step over. So every step of a beam search,
the first included, runs here.

The modules' int8 path computes the same rows with the same C functions (`csrc/rows.h`, `csrc/attend.h`),
so the logits are theirs bit for bit (`tests/inference/test_int8_step.py`). Covered: post-norm blocks whose
linear layers are all `Int8Linear`s on attnlab's C passes, ReLU FFNs, sinusoidal or learned positions, any
grouped-query layout, any beam, and nothing watching (`attnlab.models.fused`). A step whose caches hold a non-finite
key or value goes to the modules (their exact non-finite path), as does everything else: fp32 and bf16.
The encoder stays on the modules: it runs once per batch, and neither fused passes for it nor a fused step
for fp32 measured faster (BENCHMARKS.md, "Tried, not kept").
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.kernels import loader as native
from attnlab.kernels.few_queries import kernel_lengths
from attnlab.kernels.few_queries import whole_lengths as _whole_lengths
from attnlab.kernels.int8_step import native_int8_step
from attnlab.kernels.switches import Switch

from .quantize import Int8Linear

__all__ = ["Int8DecoderStep", "active", "off"]

_step = Switch()  # off inside `off()`


def off() -> contextlib.AbstractContextManager[None]:
    """Inside the block, decoding states opened get no int8 step: every step runs the modules (benchmarks
    measure what the step gives, as `attnlab.kernels.loader.off` does for the C kernels)."""
    return _step.off()


def active() -> bool:
    """Whether decoding states opened now get the int8 step where it covers the model (not inside `off()`)."""
    return bool(_step)


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class _Linear:
    """An `Int8Linear`'s operands as the kernels take them (`build` checked the layer's type). The tensors are
    held, so their addresses stay valid for the state's life even if the layer's are replaced."""

    def __init__(self, layer: nn.Module):
        assert isinstance(layer, Int8Linear)
        self.w: Tensor = layer.weight_t
        self.n: int = layer.out_features
        self.held = (layer.scale, layer.bias)
        self.cs, self.bias = layer.scale.data_ptr(), _ptr(layer.bias)


class _Norm:
    def __init__(self, ln: nn.LayerNorm):
        self.held = (ln.weight, ln.bias)  # as `_Linear`
        self.w, self.b, self.eps = _ptr(ln.weight), _ptr(ln.bias), float(ln.eps)


def _heads(mha: Any) -> tuple[int, int, int, float]:
    """A `MultiHeadAttention`'s heads, key/value groups, head width and score scale."""
    return mha.num_heads, mha.groups, mha.head_dim, 1.0 / math.sqrt(mha.head_dim)


class _Passes:
    """The kernels and the passes of a step; D is the model width."""

    def __init__(self, functions: dict, D: int):
        self.fn, self.D = functions, D

    def embed(self, stack, tokens: Tensor, position: Tensor):
        """(x, q, s) of tokens (M,) plus the position (1, D), or None for a token outside the vocabulary."""
        M, D, emb = tokens.numel(), self.D, stack.embedding.weight
        x, q, s = _rows(M, D)
        position = position.to(torch.float32).contiguous()
        status = self.fn["attnlab_step_embed"](
            emb.data_ptr(), emb.stride(0), emb.shape[0], tokens.data_ptr(), M, D, stack.embed_scale,
            position.data_ptr(), x.data_ptr(), q.data_ptr(), s.data_ptr(),
        )  # fmt: skip
        return None if status else (x, q, s)

    def add_ln(self, q, s, proj: _Linear, x, norm: _Norm):
        """LayerNorm(x + proj(q, s)) and its int8 rows."""
        n = q.shape[0]
        acc = torch._int_mm(q, proj.w)
        xo, qo, so = _rows(n, self.D)
        status = self.fn["attnlab_step_add_ln"](
            acc.data_ptr(), n, self.D, s.data_ptr(), proj.cs, proj.bias, x.data_ptr(),
            norm.w, norm.b, norm.eps, xo.data_ptr(), qo.data_ptr(), so.data_ptr(),
        )  # fmt: skip
        _check(status)
        return xo, qo, so

    def ffn(self, q, s, f1: _Linear, f2: _Linear, x, norm: _Norm):
        """LayerNorm(x + W_2 relu(W_1 x)), the hidden rows never kept in fp32."""
        n = q.shape[0]
        acc = torch._int_mm(q, f1.w)
        h, hs = torch.empty((n, f1.n), dtype=torch.int8), torch.empty(n, dtype=torch.float32)
        status = self.fn["attnlab_step_relu"](
            acc.data_ptr(), n, f1.n, s.data_ptr(), f1.cs, f1.bias, h.data_ptr(), hs.data_ptr()
        )
        _check(status)
        return self.add_ln(h, hs, f2, x, norm)


class Int8DecoderStep:
    """The int8 step of a `TransformerDecoder` (see the module docstring)."""

    ATTENTIONS = ("self_attention", "cross_attention")
    # Every linear layer int8, those the step reads and those the modules' path does (a step it hands back).
    LINEARS = tuple(f"self_attention.{w}" for w in ("W_qkv", "W_q", "W_k", "W_v", "W_o"))
    LINEARS += tuple(f"cross_attention.{w}" for w in ("W_kv", "W_q", "W_k", "W_v", "W_o"))
    LINEARS += ("ffn.dense1", "ffn.dense2")

    def __init__(self, decoder: Any, functions: dict):
        # `decoder`: a TransformerDecoder, read by its attributes (the models sit above this package)
        self.decoder, self.modules = decoder, list(decoder.modules())
        self.blocks: list = list(decoder.blocks)
        self.passes = _Passes(functions, decoder.num_hiddens)
        self.layers = [
            (_Linear(b.self_attention.W_qkv), _Linear(b.self_attention.W_o), _Linear(b.cross_attention.W_q),
             _Linear(b.cross_attention.W_o), _Linear(b.ffn.dense1), _Linear(b.ffn.dense2),
             _Norm(b.addnorm1.ln), _Norm(b.addnorm2.ln), _Norm(b.addnorm3.ln),
             _heads(b.self_attention), _heads(b.cross_attention))
            for b in self.blocks
        ]  # fmt: skip
        self.dense = _Linear(decoder.dense)

    @classmethod
    def build(cls, decoder: Any) -> Int8DecoderStep | None:
        """The int8 step for `decoder`, a `TransformerDecoder` whose every block the passes compute (its model
        checks that: `attnlab.models.fused.int8_step`), or None inside `off()` or without the C passes."""
        if not _step or type(decoder.dense) is not Int8Linear or (functions := native_int8_step()) is None:
            return None
        return cls(decoder, functions)

    def covers(self, state) -> bool:
        """The C kernels on, source lengths the kernels read as the modules would, and either the first step
        (every cache empty, an fp32 memory) or every cache finite, fp32 on the CPU, laid out as the kernel
        reads: self-attention at one row per hypothesis (B * beam), cross-attention at one row per sentence
        (B). That nothing watches the modules is the model's to check (`attnlab.models.fused.unwatched`)."""
        rows, sources = state.rows, state.memory.shape[0]
        if state.beam < 1 or len(state.caches) != len(self.blocks) or not native.active():
            return False
        lens = state.src_valid_lens
        if lens is not None and not (_whole_lengths(lens, sources) and lens.is_cpu):
            return False
        if all(sc.k is None and cc.k is None for sc, cc in state.caches):
            return native.takes(torch.float32, state.memory) and state.memory.is_contiguous()
        anc = state.ancestry
        if anc is not None and not (anc.dtype is torch.int64 and anc.is_cpu and anc.is_contiguous()):
            return False
        for sc, cc in state.caches:
            if sc.k is None or cc.k is None or not (sc.finite and cc.finite):
                return False
            if (
                not native.takes(torch.float32, sc.k, sc.v, cc.k, cc.v)
                or (sc.k.shape[0] != rows if anc is None else sc.k.shape[0] < rows)
                or cc.k.shape[0] != sources
            ):
                return False
        return True

    def __call__(self, tgt: Tensor, state) -> Tensor | None:
        """Logits (n, 1, V) of this step, or None where the modules must say what is wrong (tokens that are
        not int64 on the CPU or lie outside the vocabulary; a non-finite key or value in the memory)."""
        p, dec = self.passes, self.decoder
        n = tgt.shape[0]
        if tgt.dtype is not torch.int64 or not tgt.is_cpu:
            return None
        assert dec.pos_encoding is not None  # `build` saw to it
        rows = p.embed(dec, tgt.contiguous(), dec.pos_encoding.encoding(1, state.offset))
        if rows is None:
            return None
        x, q, s = rows
        if state.caches[0][1].k is None:
            self._project_memory(state)
            if not all(cc.finite for _, cc in state.caches):
                return None  # the modules' exact non-finite attention, on the caches just filled
        lens = kernel_lengths(state.src_valid_lens)
        anc = state.ancestry if state.ancestry is not None and state.ancestry.shape[1] else None
        for (qkv, o, cq, co, f1, f2, n1, n2, n3, sa, ca), (self_cache, cross_cache) in zip(self.layers, state.caches):
            kbuf, vbuf, at = self_cache.next_slot(n, sa[0] // sa[1], sa[2])
            q, s, status = self._attention(q, s, qkv, sa, kbuf, vbuf, write=True, at=at, lens=None, Lk=0, anc=anc)
            self_cache.advance(status != 4)
            x, q, s = p.add_ln(q, s, o, x, n1)
            ck, cv = cross_cache.k, cross_cache.v
            q, s, _ = self._attention(
                q, s, cq, ca, ck, cv, write=False, at=0, lens=lens, Lk=ck.shape[2], fold=state.beam
            )
            x, q, s = p.add_ln(q, s, co, x, n2)
            x, q, s = p.ffn(q, s, f1, f2, x, n3)
        acc = torch._int_mm(q, self.dense.w)
        ptr = acc.data_ptr()
        p.fn["attnlab_dequantize_f32"](ptr, n, self.dense.n, s.data_ptr(), self.dense.cs, self.dense.bias, 0, ptr)
        return acc.view(torch.float32).view(n, 1, self.dense.n)

    def _project_memory(self, state) -> None:
        """The first step: every block's cross-attention keys and values into its static cache, from `W_kv`
        as the modules' path computes them."""
        for block, (_, cross_cache) in zip(self.blocks, state.caches):
            ca = block.cross_attention
            k, v = ca.W_kv(state.memory).split(ca.qkv_sizes()[1:], dim=-1)
            cross_cache.update(ca.split_heads(k, ca.num_kv_heads), ca.split_heads(v, ca.num_kv_heads))

    def _attention(
        self, q, s, proj: _Linear, heads, k, v, *, write: bool, at: int, lens, Lk: int, fold: int = 1, anc=None
    ):
        """int_mm(q, proj) -> attention -> its output rows quantized; returns (q, s, the kernel's status).
        Cross-attention: `fold` consecutive query rows (a sentence's hypotheses) read one key row; self-
        attention: `anc` (n, A), where row m's first A steps lie (`TransformerState.ancestry`)."""
        n = q.shape[0]
        H, G, Dh, scale = heads
        acc = torch._int_mm(q, proj.w)
        oq, oscale = torch.empty((n, H * Dh), dtype=torch.int8), torch.empty(n, dtype=torch.float32)
        status = self.passes.fn["attnlab_step_attention"](
            acc.data_ptr(), n, s.data_ptr(), proj.cs, proj.bias, H, G, Dh,
            k.data_ptr(), *k.stride()[:3], v.data_ptr(), *v.stride()[:3],
            int(write), at, _ptr(lens), Lk, fold, _ptr(anc), 0 if anc is None else anc.shape[1], scale,
            oq.data_ptr(), oscale.data_ptr(),
        )  # fmt: skip
        if status == 2:
            raise ValueError(f"source lengths must lie in [0, {Lk}], got {lens.tolist()}")
        _check(status & 1)
        return oq, oscale, status


def _rows(n: int, D: int) -> tuple[Tensor, Tensor, Tensor]:
    """x (n, D) fp32, its int8 rows (n, D) and their scales (n,), to be written by a kernel."""
    return (
        torch.empty((n, D), dtype=torch.float32),
        torch.empty((n, D), dtype=torch.int8),
        torch.empty(n, dtype=torch.float32),
    )


def _check(status: int) -> None:
    if status:
        raise MemoryError("attnlab's int8 decoding passes ran out of memory")
