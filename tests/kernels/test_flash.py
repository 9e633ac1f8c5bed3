"""attnlab's Triton FlashAttention under Triton's CPU interpreter, against the chapter's math path (scores,
`masked_softmax`, pooling) and SDPA, float32 at 1e-4, outputs and gradients: lengths that are not multiples of
the 16-wide tile, sentences of length 0 (zeros), causal with more queries than keys (rows that see nothing),
grouped-query heads; the tiles the kernel skips, and the one-line error without Triton."""

from __future__ import annotations

import inspect
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import flash_attention, masked_softmax
from attnlab.attention.masking import causal_mask
from attnlab.kernels.flash import flash_trace

pytest.importorskip("triton")


def _math(q, k, v, lens, causal):
    """The chapter's path: scores -> masked softmax (empty rows zero) -> pooling, each KV head repeated."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = causal_mask(q.shape[2], k.shape[2])[None, None] if causal else None
    return masked_softmax(scores, lens, mask) @ v


def _sdpa(q, k, v, lens, causal):
    visible = torch.ones(q.shape[0], 1, q.shape[2], k.shape[2], dtype=torch.bool)
    if lens is not None:
        visible &= (torch.arange(k.shape[2]) < lens[:, None])[:, None, None, :]
    if causal:
        visible &= causal_mask(q.shape[2], k.shape[2])
    empty = ~visible.any(-1, keepdim=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible | empty, enable_gqa=q.shape[1] != k.shape[1])
    return out.masked_fill(empty, 0.0)


CASES = [
    # B, H, Hkv, Lq, Lk, lens, causal
    (1, 2, 2, 19, 19, None, False),  # one full tile and a ragged one
    (3, 2, 1, 21, 21, [21, 0, 9], False),  # GQA; an empty sentence; a length inside a tile
    (2, 2, 1, 17, 17, [5, 17], True),  # causal + lengths
    (1, 1, 1, 23, 9, None, True),  # more queries than keys: the first 14 see no key
]


@pytest.mark.parametrize("B,H,Hkv,Lq,Lk,lens,causal", CASES)
def test_outputs_and_gradients_match_the_math_path_and_sdpa(B, H, Hkv, Lq, Lk, lens, causal):
    torch.manual_seed(Lq + Lk)
    D = 8
    # as MultiHeadAttention passes them: (B, L, H, D) projections seen as (B, H, L, D), strided
    q = torch.randn(B, Lq, H, D, requires_grad=True).transpose(1, 2)
    k, v = (torch.randn(B, Lk, Hkv, D, requires_grad=True).transpose(1, 2) for _ in range(2))
    lens = None if lens is None else torch.tensor(lens)
    out = flash_attention(q, k, v, lens, causal)
    want = _math(q, k, v, lens, causal)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out, _sdpa(q, k, v, lens, causal), atol=1e-4, rtol=1e-4)
    grad = torch.randn_like(out)
    got, ref = torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(want, (q, k, v), grad)
    for name, a, b in zip("qkv", got, ref):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"d{name}: {m}")
    if lens is not None and 0 in lens.tolist():
        assert out[lens == 0].abs().max() == 0  # a sentence of length 0: zeros, as the math path gives


def test_the_trace_shows_skipped_tiles_and_ends_at_the_output():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1, 8, 16) for _ in range(3))
    lens = torch.tensor([8, 3])
    out, m, l, o = flash_trace(q, k, v, lens, causal=True, tile=4)  # noqa: E741
    assert m.shape == (2, 1, 8, 2) and o.shape == (2, 1, 8, 2, 16)
    torch.testing.assert_close(out, _math(q, k, v, lens, True), atol=1e-5, rtol=1e-5)
    # causal: queries 0-3 never visit key tile 1; sentence 1 (3 keys) never visits it at all
    assert m[0, 0, :4, 1].isnan().all() and not m[0, 0, 4:, 1].isnan().any()
    assert m[1, 0, :, 1].isnan().all()
    # the output after the last visited tile is the answer; the running sum is that of the visible scores
    torch.testing.assert_close(o[0, 0, 4:, 1], out[0, 0, 4:], atol=1e-6, rtol=1e-6)
    scores = (q[0, 0] @ k[0, 0].T / 4.0).masked_fill(~causal_mask(8, 8), float("-inf"))
    torch.testing.assert_close(l[0, 0, 4:, 1], torch.exp(scores[4:] - m[0, 0, 4:, 1, None]).sum(-1))


def test_bad_inputs_and_a_missing_triton_are_one_line(monkeypatch):
    q = torch.randn(2, 3, 5, 8)
    with pytest.raises(ValueError, match="H a multiple of Hkv"):
        flash_attention(q, torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8))
    with pytest.raises(ValueError, match=r"\(2,\) integer tensor"):
        flash_attention(q, q, q, torch.tensor([1.0, 2.0]))
    monkeypatch.setitem(sys.modules, "triton", None)  # as if not installed
    with pytest.raises(ValueError, match=r"pip install 'attnlab\[kernels\]'"):
        flash_attention(q, q, q)


def test_the_kernels_compile_for_a_hopper_gpu_without_one(tmp_path, monkeypatch):
    """The compiled path, which the CPU tests never take: Triton compiles each kernel for sm_90 (an H100/H200)
    with the tile sizes and launch options the wrapper uses there, no GPU needed (its bundled ptxas). Run after
    the interpreted tests, in a fresh cache: the interpreter must leave `triton.language` as it found it."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from attnlab.kernels import flash_triton
    from attnlab.kernels.flash import tiles

    t = tiles(torch.device("cuda"), 128)
    pointers = {  # bf16 tensors, fp32 statistics, int32 lengths
        "forward": ["*bf16"] * 4 + ["*fp32", "*i32"] + ["*fp32"] * 3,
        "backward_kv": ["*bf16"] * 4 + ["*fp32", "*fp32", "*bf16", "*bf16", "*i32"],
        "backward_q": ["*bf16"] * 4 + ["*fp32", "*fp32", "*bf16", "*i32"],
    }
    blocks = {"forward": ("fwd_m", "fwd_n"), "backward_kv": ("kv_m", "kv_n"), "backward_q": ("q_m", "q_n")}
    for name, ptrs in pointers.items():
        fn = getattr(flash_triton, name)
        m, n = blocks[name]
        constants = dict(HAS_LENS=True, CAUSAL=True, DOT="tf32", BLOCK_M=t[m], BLOCK_N=t[n], BLOCK_D=t["d"])
        if name == "forward":
            constants["TRACE"] = False
        params = list(inspect.signature(fn).parameters)
        runtime = [p for p in params if p not in constants]
        signature = {p: ptrs[i] if i < len(ptrs) else "fp32" if p == "scale" else "i32" for i, p in enumerate(runtime)}
        signature.update(dict.fromkeys(constants, "constexpr"))
        source = ASTSource(fn=triton.jit(fn), signature=signature, constexprs=constants)
        compiled = triton.compile(
            source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=t["warps"], num_stages=t["stages"])
        )
        assert compiled.asm["cubin"], name
        assert compiled.metadata.shared <= 228 * 1024, (name, compiled.metadata.shared)  # an H100's shared memory
