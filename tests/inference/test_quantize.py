"""attnlab.inference.quantize and int8 decoding: every Linear quantized (the output layer too), per-channel
weight scales and per-row activation scales against a reference quantize/dequantize, and greedy tokens
that agree with fp32 on a small trained model."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.inference.precision import int8_layers, prepare_for_inference
from attnlab.inference.quantize import INT8_KERNELS, Int8Linear, quantize_channels, quantize_linears
from attnlab.kernels import loader as native
from attnlab.kernels.int8_rows import SIGNATURES, quantize_rows
from attnlab.models import Transformer, TransformerConfig
from attnlab.training.loss import masked_cross_entropy

pytestmark = pytest.mark.usefixtures("one_thread")

BOS, EOS, PAD, V = 1, 2, 0, 24
# Whole greedy outputs identical to fp32 on the reverse task below (60 sentences), measured: int8 fbgemm
# 59/60, fbgemm per-tensor 58/60, per-row (int_mm) 60/60, bf16 58/60; rounding differs from one CPU to the
# next, so the floor leaves a margin. A broken
# quantization (a wrong scale axis, a transposed weight) scores near 0.
INT8_AGREEMENT = 0.9


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


def _is_int8(m: nn.Module) -> bool:
    return isinstance(m, Int8Linear) or ("quantized" in type(m).__module__ and type(m).__name__ == "Linear")


def tiny(seed: int = 0, **over) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(
        src_vocab_size=V, tgt_vocab_size=V, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64, dropout=0.0
    )
    return Transformer(TransformerConfig(**{**cfg, **over})).eval()


def test_quantize_rows_matches_a_reference_quantize_dequantize():
    torch.manual_seed(0)
    x = torch.randn(5, 12) * torch.tensor([[0.01], [1.0], [30.0], [0.0], [2.0]])  # rows of very different size
    q, scale = quantize_rows(x)
    assert q.dtype == torch.int8 and scale.shape == (5, 1)
    amax = x.abs().amax(dim=1, keepdim=True)
    ref = torch.clamp(torch.round(x / (amax / 127).clamp(min=1e-12)), -127, 127)
    assert torch.equal(q.to(torch.float32), ref)
    err = (q * scale - x).abs()
    assert bool((err <= scale / 2 + 1e-7).all())  # each row on its own grid: the small row is not crushed
    assert q[3].abs().sum() == 0  # an all-zero row quantizes to zeros, not NaN


def c_and_ops(m, x, **kw):
    """m(x) on the C passes and on PyTorch's operators alone, under inference mode: (got, ref)."""
    with torch.inference_mode():
        got = m(x, **kw)
        with native.off():
            return got, m(x, **kw)


@pytest.mark.usefixtures("c_kernels")
def test_the_c_passes_give_what_the_pytorch_ops_give():
    # Rows with halves on the grid (round half to even, as torch.round), an all-zero row, a large one.
    x = torch.tensor([[127.0, 63.5, -0.5, 1.5, 2.5, -2.5], [0.0] * 6, [3e4, -1e-3, 7.0, 0.25, -0.75, 1.0]])
    lin = nn.Linear(6, 40)
    m = Int8Linear.from_float(lin)
    got, ref = c_and_ops(m, x)
    assert native.load("int8_rows") is not None  # the C path ran above
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)
    q, scale = quantize_rows(x)
    assert q[0].tolist() == [127, 64, 0, 2, 2, -2]
    torch.manual_seed(0)
    xs = torch.randn(2, 17, 6) * 5  # leading dimensions, and a bias-free layer
    m = Int8Linear.from_float(nn.Linear(6, 40, bias=False))
    got, ref = c_and_ops(m, xs)
    assert got.shape == (2, 17, 40)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-6)
    # a non-finite activation makes its own row NaN and leaves the others alone, as on PyTorch's path
    bad = torch.randn(4, 6)
    bad[1, 2], bad[3, 0] = float("nan"), float("inf")
    got, ref = c_and_ops(m, bad)
    assert bool(got[1].isnan().all()) and bool(ref[1].isnan().all())
    assert not bool(got[3].isfinite().any()) and not bool(ref[3].isfinite().any())
    torch.testing.assert_close(got[[0, 2]], ref[[0, 2]], atol=1e-5, rtol=1e-6)


def test_per_channel_weight_scales_against_torch_quantize_per_channel():
    torch.manual_seed(0)
    w = torch.randn(6, 10) * torch.arange(1, 7.0)[:, None]
    q, scale = quantize_channels(w)
    assert scale.shape == (6,)
    torch.testing.assert_close(scale, w.abs().amax(dim=1) / 127)
    ref = torch.quantize_per_channel(w, scale.double(), torch.zeros(6, dtype=torch.long), 0, torch.qint8)
    assert torch.equal(q, ref.int_repr())
    torch.testing.assert_close(q * scale[:, None], ref.dequantize())


@pytest.mark.parametrize("kernel", INT8_KERNELS)
def test_int8_linear_against_the_dequantized_product(kernel):
    torch.manual_seed(0)
    lin = nn.Linear(16, 40)
    x = torch.randn(3, 7, 16)
    model = quantize_linears(nn.Sequential(lin), ["0"], kernel)
    got = model(x)
    assert got.shape == (3, 7, 40) and got.dtype == torch.float32
    if kernel == "int_mm":  # exact: the int32 sum of the quantized operands, rescaled
        xq, xs = quantize_rows(x.reshape(-1, 16))
        wq, ws = quantize_channels(lin.weight)
        ref = (xq.double() @ wq.double().T * xs.double() * ws.double() + lin.bias.double()).view(3, 7, 40)
        torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5)
        scales = model[0].scale
    else:
        scales = torch.as_tensor(model[0].weight().q_per_channel_scales()) if kernel == "fbgemm" else None
    if scales is not None:  # one scale per output channel, from that channel's own range
        assert scales.shape == (40,)
        torch.testing.assert_close(scales.float(), lin.weight.abs().amax(dim=1) / 127, rtol=0.02, atol=1e-6)
    torch.testing.assert_close(got, lin(x), atol=0.05, rtol=0.05)


def test_unknown_kernel_is_one_line():
    with pytest.raises(ValueError, match="unknown int8 kernel 'fp4'"):
        prepare_for_inference(tiny(), "int8", kernel="fp4")


@pytest.mark.parametrize("kernel", INT8_KERNELS)
@pytest.mark.parametrize("share", [False, True])
def test_int8_quantizes_every_linear_including_the_output_layer(kernel, share):
    model = tiny(share_embeddings=share)
    q = prepare_for_inference(model, "int8", kernel=kernel)
    linears = [n for n, m in model.named_modules() if type(m) is nn.Linear]
    assert "decoder.dense" in linears and int8_layers(model) == linears
    assert all(_is_int8(q.get_submodule(n)) for n in linears), q
    assert not any(type(m) is nn.Linear for m in q.modules())  # no float Linear left
    # The caller's model is untouched; a tied embedding stays a float matrix in both.
    assert all(type(model.get_submodule(n)) is nn.Linear for n in linears)
    assert q.decoder.embedding.weight.dtype == torch.float32
    if share:
        assert model.decoder.dense.weight is model.decoder.embedding.weight


def _reverse_batch(g: torch.Generator, B: int):
    lens = torch.randint(3, 8, (B,), generator=g)
    src = torch.full((B, 7), PAD)
    tgt_in, tgt_out = torch.full((B, 8), PAD), torch.full((B, 8), PAD)
    for i, n in enumerate(lens.tolist()):
        s = torch.randint(3, V, (n,), generator=g)
        src[i, :n] = s
        tgt_in[i, : n + 1] = torch.cat([torch.tensor([BOS]), s.flip(0)])
        tgt_out[i, : n + 1] = torch.cat([s.flip(0), torch.tensor([EOS])])
    return src, lens, tgt_in, tgt_out


@pytest.fixture(scope="module")
def trained():
    model = tiny(max_len=16)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    with torch.random.fork_rng():
        torch.set_num_threads(1)
        for _ in range(150):
            src, lens, tgt_in, tgt_out = _reverse_batch(g, 32)
            loss = masked_cross_entropy(model(src, tgt_in, lens), tgt_out, lens + 1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    src, lens, _, _ = _reverse_batch(torch.Generator().manual_seed(1), 60)
    return model, src, lens


@pytest.mark.parametrize("precision, kernel", [("int8", k) for k in INT8_KERNELS] + [("bf16", None)])
def test_greedy_tokens_agree_with_fp32_on_a_trained_model(trained, precision, kernel):
    model, src, lens = trained
    ref = [h.tokens for h in greedy(model, src, lens, BOS, EOS, max_len=10)]
    assert sum(r == s.flip(0)[: len(r)].tolist() for r, s in zip(ref, src)) > 0  # it has learned something
    fast = prepare_for_inference(model, precision, kernel=kernel) if kernel else prepare_for_inference(model, precision)
    got = [h.tokens for h in greedy(fast, src, lens, BOS, EOS, max_len=10)]
    same = sum(a == b for a, b in zip(got, ref)) / len(ref)
    assert same >= INT8_AGREEMENT, f"{precision} {kernel}: {same:.2f} of sentences as fp32"


def test_per_row_int8_gives_a_sentence_the_same_output_in_any_batch(trained):
    # Each token's activations get their own scale, so what a sentence decodes to does not depend on the
    # sentences beside it (fbgemm's per-tensor activation scale is shared by the whole batch).
    model, src, lens = trained
    fast = prepare_for_inference(model, "int8", kernel="int_mm")
    together = [h.tokens for h in greedy(fast, src[:12], lens[:12], BOS, EOS, max_len=10)]
    alone = [greedy(fast, src[i : i + 1], lens[i : i + 1], BOS, EOS, max_len=10)[0].tokens for i in range(12)]
    assert together == alone


@pytest.mark.usefixtures("c_kernels")
@pytest.mark.parametrize("K", [15, 16, 63, 64, 80, 197, 384])
def test_the_c_quantize_pass_gives_quantize_rows_exactly_at_every_width(K):
    # Widths below, at and past the 16-lane vectors and the 4-vector unrolled maximum, with a tail.
    torch.manual_seed(K)
    x = torch.randn(9, K) * 3
    x[1] = 0.0  # an all-zero row
    x[2, K // 2] = 127.0  # scale 1: every other element lands on the grid's halves below
    x[2, : K // 2] = torch.arange(K // 2) % 7 - 3.5
    x[3, -1] = 1e4  # the maximum in the scalar tail
    x[4, 0] = -2e4  # a negative maximum in the first vector
    x[5, K - 1] = float("nan")
    x[6, K // 3] = float("inf")
    x[7, min(K - 1, 40)] = float("nan")  # in the vector part where K allows
    quantize = native.function("int8_rows", "attnlab_quantize_rows_f32", SIGNATURES["attnlab_quantize_rows_f32"])
    q = torch.empty(9, K, dtype=torch.int8)
    s = torch.empty(9)
    wide = torch.zeros(9, K + 5)
    wide[:, :K] = x  # rows K + 5 apart: the kernel reads them through ldx
    quantize(wide.data_ptr(), K + 5, 9, K, q.data_ptr(), s.data_ptr())
    ref_q, ref_s = quantize_rows(x)
    finite = [0, 1, 2, 3, 4, 8]
    assert torch.equal(q[finite], ref_q[finite])
    assert torch.equal(s[finite], ref_s.squeeze(1)[finite])
    assert s[5].isnan() and s[7].isnan() and s[6].isinf()  # NaN rows: NaN scale; inf: inf scale
    assert q[2, : K // 2].tolist() == torch.round(x[2, : K // 2]).to(torch.int8).tolist()  # half to even


@pytest.mark.usefixtures("c_kernels")
def test_relu_in_the_rescaling_pass_is_relu_after_the_layer():
    from attnlab.models.transformer_layers import PositionWiseFFN

    torch.manual_seed(3)
    m = Int8Linear.from_float(nn.Linear(24, 40))
    x = torch.randn(7, 24)
    x[2, 5] = float("nan")  # a NaN row stays NaN through the ReLU, as torch.relu leaves it
    with torch.inference_mode():
        fused = m(x, relu=True)
        with native.off():
            ref = torch.relu(m(x))
            plain = m(x, relu=True)
    torch.testing.assert_close(fused, ref, atol=1e-6, rtol=1e-6, equal_nan=True)
    torch.testing.assert_close(plain, ref, atol=0, rtol=0, equal_nan=True)
    assert bool(fused[2].isnan().all()) and bool((fused[[0, 1, 3]] >= 0).all()) and bool((fused == 0).any())
    ffn = PositionWiseFFN(24, 40).eval()
    q = quantize_linears(ffn, ["dense1", "dense2"])
    calls = []
    forward = q.dense1.forward
    q.dense1.forward = lambda x, relu=False: calls.append(relu) or forward(x, relu)
    with torch.inference_mode():
        got = q(x[None, [0, 1, 3]])
        expected = q.dense2(torch.relu(forward(x[None, [0, 1, 3]])))
    assert calls == [True]  # the FFN asked its first layer for the ReLU
    assert torch.equal(got, expected)
    bare = Int8Linear.from_float(nn.Linear(24, 40, bias=False))  # no bias: the other rescaling loop
    with torch.inference_mode():
        fused = bare(x[[0, 1]], relu=True)
        with native.off():
            ref = torch.relu(bare(x[[0, 1]]))
    torch.testing.assert_close(fused, ref, atol=1e-6, rtol=1e-6)
