"""The kernels' wrappers against PyTorch: the few-queries kernel (`native_few_queries`) against SDPA (head sizes
on and off its vector path, strided cache views, grouped KV heads, key lengths, 0 and past the end included),
MultiHeadAttention's decoding and encoder paths, LayerNorm(x + y), the finiteness guard and the cache's row
copy, each with what it declines."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import MultiHeadAttention
from attnlab.attention.cache import KVCache
from attnlab.kernels import loader as native
from attnlab.kernels.copy_rows import copy_rows
from attnlab.kernels.few_queries import native_few_queries
from attnlab.kernels.finite import all_finite, native_all_finite
from attnlab.kernels.layer_norm import native_add_layer_norm
from attnlab.models import Transformer, TransformerConfig

pytestmark = pytest.mark.usefixtures("c_kernels")


def _sdpa(q, k, v, lens, groups):
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if lens is None:
        return F.scaled_dot_product_attention(q, k, v)
    visible = (torch.arange(k.shape[2])[None, :] < lens[:, None])[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible | ~visible.any(-1, keepdim=True))
    return out.masked_fill(~visible.any(-1, keepdim=True), 0.0)  # no visible key: zeros


@pytest.mark.parametrize("Dh", [16, 48, 128, 20, 144])  # multiples of 16 up to 128 take the vector path
@pytest.mark.parametrize("Lk", [1, 5, 17, 33])
@pytest.mark.parametrize("Lq,groups", [(1, 1), (3, 2)])
def test_matches_sdpa(Dh, Lk, Lq, groups):
    torch.manual_seed(Dh + Lk)
    B, H = 5, 4
    q = torch.randn(B, Lq, 3 * H * Dh)[..., : H * Dh].view(B, Lq, H, Dh).transpose(1, 2)  # a strided view
    cap = Lk + 7  # keys/values as the decoding cache holds them: (B, Hkv, capacity, Dh), the first Lk steps
    k = torch.randn(B, H // groups, cap, Dh)[:, :, :Lk]
    v = torch.randn(B, H // groups, cap, Dh)[:, :, :Lk]
    lens = torch.tensor([Lk, 1, 0, Lk, max(Lk - 2, 1)])
    for key_lens in (None, lens):
        got = native_few_queries(q, k, v, key_lens, groups)
        assert got is not None and got.shape == (B, H, Lq, Dh)
        torch.testing.assert_close(got, _sdpa(q, k, v, key_lens, groups), atol=2e-6, rtol=1e-5)
    # the layout the output projection reads: (B, Lq, H, Dh) contiguous
    assert got.transpose(1, 2).is_contiguous()
    # lengths PyTorch's path refuses (past the keys, negative, booleans) are left to it, which names them
    for bad in (torch.tensor([Lk + 1, 1, 1, 1, 1]), torch.tensor([-1, 1, 1, 1, 1]), torch.ones(B, dtype=torch.bool)):
        assert native_few_queries(q, k, v, bad, groups) is None


@pytest.mark.parametrize("Dh", [48, 20])
@pytest.mark.parametrize("Lq", [1, 6])
def test_bf16_inputs_are_computed_in_fp32(Dh, Lq):
    torch.manual_seed(0)
    B, H, Lk = 4, 4, 13
    bf16 = torch.bfloat16
    q = torch.randn(B, Lq, 3 * H * Dh, dtype=bf16)[..., : H * Dh].view(B, Lq, H, Dh).transpose(1, 2)
    k, v = (torch.randn(B, H // 2, Lk + 3, Dh, dtype=bf16)[:, :, :Lk] for _ in range(2))  # cache views
    assert k.stride(1) != Lk * Dh and q.stride(0) != H * Lq * Dh  # neither contiguous
    lens = torch.tensor([13, 1, 7, 0])
    got = native_few_queries(q, k, v, lens, groups=2)
    assert got is not None and got.dtype == torch.bfloat16
    ref = _sdpa(q.float(), k.float(), v.float(), lens, 2)  # exact arithmetic on the same bf16 values
    # one rounding, at the end: within a bf16 step of the exact result (SDPA in bf16 rounds at every stage)
    torch.testing.assert_close(got.float(), ref, atol=1e-6, rtol=2**-8)
    assert native_few_queries(q, k.float(), v.float()) is None  # mixed dtypes: PyTorch's path


def test_more_keys_than_its_stack_buffer():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 1, 16), torch.randn(2, 2, 1100, 16), torch.randn(2, 2, 1100, 16)
    lens = torch.tensor([1100, 700])
    got = native_few_queries(q, k, v, lens)
    assert got is not None
    torch.testing.assert_close(got, _sdpa(q, k, v, lens, 1), atol=2e-6, rtol=1e-5)


def test_lengths_of_the_wrong_size_get_pytorchs_error():
    q = torch.randn(3, 2, 1, 16)
    assert native_few_queries(q, q, q, torch.tensor([1])) is None
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(3, 5, 32)
    with torch.inference_mode(), pytest.raises(ValueError, match="valid_lens has batch size 1"):
        mha(x, x, x, valid_lens=torch.tensor([3]))


def test_declines_what_it_does_not_compute():
    q, k = torch.randn(2, 2, 1, 16), torch.randn(2, 2, 4, 16)
    assert native_few_queries(q.half(), k.half(), k.half()) is None
    assert native_few_queries(q.requires_grad_(), k, k) is None
    long_q, long_k = torch.randn(1, 2, 80, 16), torch.randn(1, 2, 80, 16)  # 80 x 80 > 4096: SDPA's
    assert native_few_queries(long_q, long_k, long_k) is None
    assert native_few_queries(torch.randn(2, 2, 1, 32)[..., ::2], k, k) is None  # head dim not contiguous


@pytest.mark.parametrize("dtype, D, tol", [(torch.float32, 32, (2e-6, 1e-5)), (torch.bfloat16, 64, (3e-2, 3e-2))])
def test_multihead_decoding_and_encoder_paths_match_pytorch_kernels(dtype, D, tol):
    atol, rtol = tol
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4, num_kv_heads=2).eval().to(dtype)
    x = torch.randn(3, 6, D).to(dtype)
    lens = torch.tensor([6, 2, 4])
    with torch.inference_mode():
        got = mha(x, x, x, valid_lens=lens)  # an encoder's self-attention: 6 x 6 with key lengths
        with native.off():
            ref = mha(x, x, x, valid_lens=lens)
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), ref.float(), atol=atol, rtol=rtol)
        outs = {}
        for name, ctx in (("native", torch.inference_mode), ("off", native.off)):
            with ctx():
                cache, steps = KVCache(), []
                for t in range(5):  # causal decoding, one query a step against the growing cache
                    steps.append(mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], causal=True, cache=cache))
                outs[name] = torch.cat(steps, 1).float()
        torch.testing.assert_close(outs["native"], outs["off"], atol=atol, rtol=rtol)


def test_a_transformer_decodes_the_same_tokens_with_and_without_the_kernel():
    from attnlab.decoding.generator import generate
    from attnlab.decoding.options import DecodeOptions

    torch.manual_seed(0)
    cfg = TransformerConfig(40, 40, num_hiddens=32, num_heads=2, num_layers=2, ffn_num_hiddens=64, dropout=0.0)
    model = Transformer(cfg).eval()
    src, lens = torch.randint(3, 40, (6, 9)), torch.tensor([9, 3, 7, 1, 9, 5])

    def decode(beam):
        return [hs[0] for hs in generate(model, src, lens, DecodeOptions(beam=beam), bos=1, eos=2, max_len=12)]

    got, beams = decode(1), decode(3)
    with native.off():
        ref, ref_beams = decode(1), decode(3)
    assert [h.tokens for h in got] == [h.tokens for h in ref]
    assert [h.tokens for h in beams] == [h.tokens for h in ref_beams]
    for a, b in zip(got, ref):
        assert a.score == pytest.approx(b.score, abs=1e-5)


def test_add_layer_norm_matches_pytorch_and_declines_the_rest():
    from attnlab.models.transformer_layers import AddNorm

    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(24)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x, y = torch.randn(3, 5, 24) * 4, torch.randn(3, 5, 24)
    ln64 = torch.nn.LayerNorm(24).double()
    with torch.inference_mode():
        got = native_add_layer_norm(x, y, ln)
        torch.testing.assert_close(got, ln(x + y), atol=3e-6, rtol=1e-5)
        plain = torch.nn.LayerNorm(24, elementwise_affine=False)
        torch.testing.assert_close(native_add_layer_norm(x, y, plain), plain(x + y), atol=3e-6, rtol=1e-5)
        assert native_add_layer_norm(x.transpose(0, 1), y.transpose(0, 1), ln) is None  # not contiguous
        assert native_add_layer_norm(x.double(), y.double(), ln64) is None
        assert native_add_layer_norm(x, y, torch.nn.LayerNorm((5, 24))) is None  # over two dimensions
    assert native_add_layer_norm(x, y, ln) is None  # autograd: the weights need gradients
    block = AddNorm(24, dropout=0.5)
    block.ln = ln
    torch.manual_seed(1)
    out = block(x, y)  # training with dropout: PyTorch's path, which drops
    assert not torch.allclose(out, ln(x + y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_c_finiteness_pass_agrees_with_isfinite(dtype):
    torch.manual_seed(0)
    base = torch.randn(3, 2, 4, 50).to(dtype)  # 50: vector lanes and a tail
    view = base[:, :, :3, :40]  # strided: what lies outside the view must not count
    assert native_all_finite(view) is True
    for where, value in (((0, 0, 3, 0), "inf"), ((1, 1, 0, 45), "nan")):  # outside the view
        outside = base.clone()
        outside[where] = float(value)
        assert native_all_finite(outside[:, :, :3, :40]) is True
        assert native_all_finite(outside) is False
    for where in ((0, 0, 0, 0), (2, 1, 2, 39), (1, 0, 1, 17)):
        for value in ("nan", "inf", "-inf"):
            t = base.clone()
            t[where] = float(value)
            assert native_all_finite(t[:, :, :3, :40]) is False
            assert all_finite(t[:, :, :3, :40]) is False
    assert native_all_finite(torch.randn(5)) is True  # fewer dimensions
    assert native_all_finite(torch.randn(2, 2, 2, 2, 2)) is None  # more than four: the sum path
    assert native_all_finite(torch.randn(4, 3).t()) is None  # last dimension not contiguous
    assert all_finite(torch.full((4, 3), float("nan")).t()) is False


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_c_row_copy_writes_what_copy_writes(dtype):
    torch.manual_seed(1)
    qkv = torch.randn(5, 1, 3, 4, 8).to(dtype)  # a fused projection's output, viewed per head
    k = qkv[:, :, 1].transpose(1, 2)  # (B, H, 1, Dh), strided
    buf = torch.zeros(5, 4, 7, 8, dtype=dtype)
    ref = buf.clone()
    copy_rows(buf[:, :, 3:4], k)
    ref[:, :, 3:4] = k
    assert torch.equal(buf, ref)  # only the step's slot written
    copy_rows(buf[:, :, :2], torch.ones(5, 4, 2, 8, dtype=dtype))  # more than one step
    assert bool((buf[:, :, :2] == 1).all()) and torch.equal(buf[:, :, 2:], ref[:, :, 2:])
    wide = torch.zeros(5, 4, 2, 8)
    copy_rows(wide, torch.ones(5, 4, 2, 8, dtype=torch.bfloat16))  # dtypes differ: PyTorch's copy converts
    assert bool((wide == 1).all())
