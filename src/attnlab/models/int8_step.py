"""A greedy decoding step of an int8 decoder (`--precision int8`) as int8 matmuls with one C pass between
each two (`csrc/int8_step.c`): about 30 calls per step of a 2-layer decoder instead of about 290.

    x, (q, s) = embed(tokens)                                   fp32 rows and their int8 quantization
    per block:
        q, s = attention(int_mm(q, W_qkv))                      the new key/value into the cache, then attention
        x, (q, s) = add_ln(int_mm(q, W_o), x)                   LayerNorm(x + W_o o)
        q, s = attention(int_mm(q, W_q'), cross cache)          cross-attention over the source
        x, (q, s) = add_ln(int_mm(q, W_o'), x)
        q, s = relu(int_mm(q, W_1)); x, (q, s) = add_ln(int_mm(q, W_2), x)
    logits = dequantize(int_mm(q, W_dense))

The modules' int8 path computes the same rows with the same functions (`csrc/rows.h`, `csrc/attend.h`),
so the logits are theirs bit for bit (`tests/models/test_decoder_step.py`). It covers post-norm blocks whose
linear layers are all `Int8Linear`s on attnlab's C passes, with ReLU FFNs and sinusoidal or learned
positions; a step whose caches hold a non-finite key or value goes to the modules (their exact non-finite
path), as does everything `DecoderStep.covers` refuses.
"""

from __future__ import annotations

import ctypes
import math

import torch
from torch import Tensor, nn

from attnlab.utils import native
from attnlab.utils.quantize import Int8Linear

from .decoder_step import DecoderStep

__all__ = ["Int8DecoderStep"]

_PTR, _I64, _F = native.PTR, native.I64, ctypes.c_float
_SIGNATURES = {
    "attnlab_step_embed": [_PTR, _I64, _I64, _PTR, _I64, _I64, _F, _PTR, _PTR, _PTR, _PTR],
    "attnlab_step_attention": [_PTR, _I64, _PTR, _PTR, _PTR, _I64, _I64, _I64]
    + [_PTR, _I64, _I64, _I64] * 2
    + [ctypes.c_int, _I64, _PTR, _I64, _F, _PTR, _PTR],
    "attnlab_step_add_ln": [_PTR, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _PTR, _PTR, _F, _PTR, _PTR, _PTR],
    "attnlab_step_relu": [_PTR, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _PTR],
}
_DEQUANTIZE_ARGS = [_PTR, _I64, _I64, _PTR, _PTR, _PTR, ctypes.c_int, _PTR]
_QUANTIZE_ARGS = [_PTR, _I64, _I64, _I64, _PTR, _PTR]


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class _Linear:
    """An `Int8Linear`'s operands as the kernels take them (`heads`: (KV heads, head size) of a W_kv)."""

    def __init__(self, layer: Int8Linear, heads: tuple[int, int] = (0, 0)):
        self.w, self.n, self.heads = layer.weight_t, layer.out_features, heads
        self.cs, self.bias = layer.scale.data_ptr(), _ptr(layer.bias)


class _Norm:
    def __init__(self, ln: nn.LayerNorm):
        self.w, self.b, self.eps = _ptr(ln.weight), _ptr(ln.bias), float(ln.eps)


class Int8DecoderStep(DecoderStep):
    """The int8 step of a `TransformerDecoder` (see the module docstring)."""

    def __init__(self, decoder, functions: dict):
        super().__init__(decoder)
        self.fn = functions
        self.D = decoder.num_hiddens
        self.layers = []
        for block in self.blocks:
            sa, ca = block.self_attention, block.cross_attention
            self.layers.append(
                (
                    _Linear(sa.W_qkv), _Linear(sa.W_o), _Linear(ca.W_q), _Linear(ca.W_o),
                    _Linear(block.ffn.dense1), _Linear(block.ffn.dense2),
                    _Norm(block.addnorm1.ln), _Norm(block.addnorm2.ln), _Norm(block.addnorm3.ln),
                    (sa.num_heads, sa.groups, sa.head_dim, 1.0 / math.sqrt(sa.head_dim)),
                    (ca.num_heads, ca.groups, ca.head_dim, 1.0 / math.sqrt(ca.head_dim)),
                )
            )  # fmt: skip
        self.dense = _Linear(decoder.dense)
        # cross-attention's W_kv per block, for the first step
        self.kv = [_Linear(b.cross_attention.W_kv, (b.cross_attention.num_kv_heads, b.cross_attention.head_dim)) for b in self.blocks]

    @classmethod
    def build(cls, decoder: nn.Module) -> Int8DecoderStep | None:
        """The int8 step for `decoder`, or None where it does not cover it (see the module docstring)."""
        if DecoderStep.build(decoder) is None:
            return None
        emb = decoder.embedding.weight
        if not (emb.dtype is torch.float32 and emb.is_cpu and emb.stride(-1) == 1) or type(decoder.dense) is not Int8Linear:
            return None
        for block in decoder.blocks:
            sa, ca, ffn = block.self_attention, block.cross_attention, block.ffn
            linears = [getattr(sa, "W_qkv", None), sa.W_q, sa.W_k, sa.W_v, sa.W_o, ca.W_q, getattr(ca, "W_kv", None)]
            linears += [ca.W_k, ca.W_v, ca.W_o, ffn.dense1, ffn.dense2]
            if any(type(m) is not Int8Linear for m in linears) or type(ffn.activation) is not nn.ReLU:
                return None
            if block.addnorm1.norm_first or any(not _float_params(s.ln) or s.ln.normalized_shape[0] != decoder.num_hiddens for s in (block.addnorm1, block.addnorm2, block.addnorm3)):
                return None
        functions = {s: native.function("int8_step", s, a, ctypes.c_int) for s, a in _SIGNATURES.items()}
        functions["dequantize"] = native.function("int8_rows", "attnlab_dequantize_f32", _DEQUANTIZE_ARGS)
        functions["quantize"] = native.function("int8_rows", "attnlab_quantize_rows_f32", _QUANTIZE_ARGS)
        if any(f is None for f in functions.values()):
            return None
        return cls(decoder, functions)

    def covers(self, state) -> bool:
        """Nothing in the way (`DecoderStep.unwatched`), and either the first step (every cache empty, an fp32
        memory) or every cache finite with its keys laid out as the kernel reads them."""
        if not self.unwatched(state):
            return False
        if all(sc.k is None and cc.k is None for sc, cc in state.caches):
            return native.takes(torch.float32, state.memory) and state.memory.is_contiguous()
        for sc, cc in state.caches:
            if sc.k is None or cc.k is None or not (sc.finite and cc.finite):
                return False
            if cc.k.stride(-1) != 1 or cc.v.stride(-1) != 1:
                return False
        return True

    def __call__(self, tgt: Tensor, state) -> Tensor:
        fn, D = self.fn, self.D
        dec = self.decoder
        n, L = tgt.shape[0], state.offset
        tokens = tgt.contiguous()
        position = dec.pos_encoding.encoding(1, L).to(torch.float32).contiguous()
        x, q, s = _rows(n, D)
        emb = dec.embedding.weight
        if fn["attnlab_step_embed"](
            emb.data_ptr(), emb.stride(0), emb.shape[0], tokens.data_ptr(), n, D, dec.embed_scale,
            position.data_ptr(), x.data_ptr(), q.data_ptr(), s.data_ptr(),
        ):  # fmt: skip
            return super().__call__(tgt, state)  # a token outside the vocabulary: the modules say so
        if state.caches[0][1].k is None:
            self._project_memory(state)
        lens = state.src_valid_lens
        if lens is not None and not (lens.dtype is torch.int64 and lens.is_contiguous()):
            lens = lens.to(torch.int64).contiguous()
        for (qkv, o, cq, co, f1, f2, n1, n2, n3, sa, ca), (self_cache, cross_cache) in zip(self.layers, state.caches):
            kbuf, vbuf, at = self_cache.next_slot(n, sa[0] // sa[1], sa[2])
            q, s, status = self._attention(q, s, qkv, sa, kbuf, vbuf, True, at, None, 0)
            self_cache.advance(status != 4)
            x, q, s = self._add_ln(q, s, o, x, n1)
            q, s, _ = self._attention(q, s, cq, ca, cross_cache.k, cross_cache.v, False, 0, lens, cross_cache.k.shape[2])
            x, q, s = self._add_ln(q, s, co, x, n2)
            acc = torch._int_mm(q, f1.w)
            h, hs = torch.empty((n, f1.n), dtype=torch.int8), torch.empty(n)
            _check(fn["attnlab_step_relu"](acc.data_ptr(), n, f1.n, s.data_ptr(), f1.cs, f1.bias, h.data_ptr(), hs.data_ptr()))
            x, q, s = self._add_ln(h, hs, f2, x, n3)
        acc = torch._int_mm(q, self.dense.w)
        ptr = acc.data_ptr()
        fn["dequantize"](ptr, n, self.dense.n, s.data_ptr(), self.dense.cs, self.dense.bias, 0, ptr)
        return acc.view(torch.float32).view(n, 1, self.dense.n)

    def _project_memory(self, state) -> None:
        """The first step: every block's cross-attention keys and values, W_kv of the memory's int8 rows
        (quantized once for all blocks), into its static cache, as the modules' path computes them."""
        memory = state.memory
        B, S, D = memory.shape
        mq, ms = torch.empty((B * S, D), dtype=torch.int8), torch.empty(B * S)
        self.fn["quantize"](memory.data_ptr(), D, B * S, D, mq.data_ptr(), ms.data_ptr())
        for kv, (_, cross_cache) in zip(self.kv, state.caches):
            acc = torch._int_mm(mq, kv.w)
            ptr = acc.data_ptr()
            self.fn["dequantize"](ptr, B * S, kv.n, ms.data_ptr(), kv.cs, kv.bias, 0, ptr)
            Hkv, Dh = kv.heads
            kvf = acc.view(torch.float32).view(B, S, kv.n)
            k = kvf[..., : kv.n // 2].view(B, S, Hkv, Dh).transpose(1, 2)  # (B, Hkv, S, Dh)
            v = kvf[..., kv.n // 2 :].view(B, S, Hkv, Dh).transpose(1, 2)
            cross_cache.update(k, v)

    def _attention(self, q, s, proj: _Linear, heads, k, v, write: bool, at: int, lens, Lk: int):
        """int_mm(q, proj) -> attention -> its output rows quantized; returns (q, s, the kernel's status)."""
        n = q.shape[0]
        H, G, Dh, scale = heads
        acc = torch._int_mm(q, proj.w)
        oq, os = torch.empty((n, H * Dh), dtype=torch.int8), torch.empty(n)
        status = self.fn["attnlab_step_attention"](
            acc.data_ptr(), n, s.data_ptr(), proj.cs, proj.bias, H, G, Dh,
            k.data_ptr(), *k.stride()[:3], v.data_ptr(), *v.stride()[:3],
            int(write), at, _ptr(lens), Lk, scale, oq.data_ptr(), os.data_ptr(),
        )  # fmt: skip
        if status == 2:
            raise ValueError(f"source lengths must lie in [0, {Lk}], got {lens.tolist()}")
        _check(status & 1)
        return oq, os, status

    def _add_ln(self, q, s, proj: _Linear, x, norm: _Norm):
        n = q.shape[0]
        acc = torch._int_mm(q, proj.w)
        xo, qo, so = _rows(n, self.D)
        _check(
            self.fn["attnlab_step_add_ln"](
                acc.data_ptr(), n, self.D, s.data_ptr(), proj.cs, proj.bias, x.data_ptr(),
                norm.w, norm.b, norm.eps, xo.data_ptr(), qo.data_ptr(), so.data_ptr(),
            )  # fmt: skip
        )
        return xo, qo, so


def _rows(n: int, D: int) -> tuple[Tensor, Tensor, Tensor]:
    """x (n, D) fp32, its int8 rows (n, D) and their scales (n,), to be written by a kernel."""
    return torch.empty((n, D)), torch.empty((n, D), dtype=torch.int8), torch.empty(n)


def _float_params(ln: nn.LayerNorm) -> bool:
    """A LayerNorm over the last D features whose weight and bias (both or neither) the kernel reads."""
    return (
        len(ln.normalized_shape) == 1
        and (ln.weight is None) == (ln.bias is None)
        and native.takes(torch.float32, ln.weight, ln.bias)
    )


def _check(status: int) -> None:
    if status:
        raise MemoryError("attnlab's int8 decoding step ran out of memory")
