"""Every C file in src/attnlab/csrc builds here and, called once, gives what its PyTorch fallback gives.

Each kernel's caller falls back to PyTorch when its library cannot be had, so without this test a kernel
that stopped building would leave every other test passing (they would compare PyTorch with PyTorch). The
case's name is the C file's: a kernel that fails to build fails `test_kernel_builds_and_matches_its_fallback[NAME]`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from attnlab.inference import int8_step
from attnlab.inference.int8_step import Int8DecoderStep
from attnlab.inference.precision import prepare_for_inference
from attnlab.kernels import loader
from attnlab.kernels.argmax import argmax_rows, native_pick
from attnlab.kernels.beam_topk import beam_candidates
from attnlab.kernels.copy_rows import native_copy_rows
from attnlab.kernels.deal import PhraseRows, deal
from attnlab.kernels.few_queries import few_queries_attention, native_few_queries
from attnlab.kernels.finite import native_all_finite
from attnlab.kernels.gather_rows import gather_rows
from attnlab.kernels.int8_rows import int8_linear, native_int8_linear
from attnlab.kernels.layer_norm import native_add_layer_norm
from attnlab.kernels.sample import sample_top_k
from attnlab.models import Transformer, TransformerConfig

# Not c_kernels: that one loads a single kernel, and this file must name each one that fails to build.
pytestmark = pytest.mark.usefixtures("c_compiler")


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """Every kernel built afresh in a cache of this module's own (others' runs share the default one)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTNLAB_CACHE", str(tmp_path_factory.mktemp("kernel-cache")))
    mp.delenv("ATTNLAB_NATIVE", raising=False)
    loader.reset()
    yield
    mp.undo()
    loader.reset()


def _few_queries() -> None:
    q, k = torch.randn(3, 4, 1, 32), torch.randn(3, 4, 9, 32)
    got = native_few_queries(q, k, k)
    assert got is not None, "the C path did not run"
    torch.testing.assert_close(got, few_queries_attention(q, k, k), atol=2e-6, rtol=1e-5)


def _finite() -> None:
    t = torch.randn(2, 3, 4, 40)
    assert native_all_finite(t) is True
    t[1, 2, 3, 39] = float("nan")
    assert native_all_finite(t) is False


def _copy_rows() -> None:
    src, dst = torch.randn(2, 4, 3, 16), torch.zeros(2, 4, 10, 16)
    assert native_copy_rows(dst[:, :, 5:8], src), "the C path did not run"
    assert torch.equal(dst[:, :, 5:8], src) and not dst[:, :, :5].any() and not dst[:, :, 8:].any()


def _argmax() -> None:
    rows = torch.randn(5, 300)
    got = native_pick(rows, scores=True)
    assert got is not None, "the C path did not run"
    tokens, lp = got
    assert torch.equal(tokens, argmax_rows(rows))
    assert lp is not None
    want = rows.gather(1, tokens[:, None]).squeeze(1) - torch.logsumexp(rows, dim=-1)
    torch.testing.assert_close(lp, want, atol=1e-5, rtol=1e-5)


def _layer_norm() -> None:
    ln, x, y = torch.nn.LayerNorm(48), torch.randn(6, 48), torch.randn(6, 48)
    with torch.no_grad():
        torch.nn.init.normal_(ln.weight)
        got = native_add_layer_norm(x, y, ln)
        assert got is not None, "the C path did not run"
        torch.testing.assert_close(got, ln(x + y), atol=3e-6, rtol=1e-5)


def _int8_rows() -> None:
    x = torch.randn(7, 32)
    w = torch.randint(-127, 128, (32, 24), dtype=torch.int8)
    scale, bias = torch.rand(24) / 100, torch.randn(24)
    got = native_int8_linear(x, w, scale, bias, relu=True)
    assert got is not None, "the C path did not run"
    with loader.off():
        want = int8_linear(x, w, scale, bias, relu=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _int8_step() -> None:
    # Its fallback is the model's own modules (`attnlab.inference.int8_step`).
    torch.manual_seed(0)
    cfg = TransformerConfig(30, 30, num_hiddens=32, num_heads=2, num_layers=1, ffn_num_hiddens=48)
    model = prepare_for_inference(Transformer(cfg).eval(), "int8")
    src, lens, tgt = torch.randint(3, 30, (3, 5)), torch.tensor([5, 3, 4]), torch.randint(3, 30, (3, 1))
    with torch.inference_mode():
        state = model.start_decoding(src, lens)
        assert isinstance(state.step, Int8DecoderStep), "the fused step did not run"
        fused = model.decode_step(tgt, state)[0]
        with int8_step.off():
            modules = model.decode_step(tgt, model.start_decoding(src, lens))[0]
    torch.testing.assert_close(fused, modules, rtol=0, atol=0)


def _gather_rows() -> None:
    src, dst = torch.randn(4, 2, 3, 8), torch.empty(3, 2, 3, 8)
    index = torch.tensor([3, 0, 3])
    with torch.inference_mode():
        gather_rows(dst, src, index)
    assert torch.equal(dst, src[index])


def _beam_topk() -> None:
    logits, scores = torch.randn(6, 50), torch.randn(3, 2)
    got = beam_candidates(logits, scores, 4)
    with loader.off():
        want = beam_candidates(logits, scores, 4)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def _deal() -> None:
    g = torch.Generator().manual_seed(0)
    n, K, C, S, T = 3, 2, 9, 5, 2
    cands = (torch.randn(n, C, generator=g), torch.randint(0, K, (n, C), generator=g),
             torch.randint(0, 6, (n, C), generator=g), torch.randn(n, C, generator=g))  # fmt: skip
    cands[0][0, 3] = float("-inf")
    tokens = torch.stack([torch.randperm(6, generator=g)[:T] for _ in range(S)])  # a row's tokens are distinct
    rows = PhraseRows(tokens, torch.randint(0, S, (S, T), generator=g), torch.randint(0, S, (S,), generator=g),
                      torch.randint(0, 3, (S,), generator=g))  # fmt: skip
    st, fresh = torch.randint(0, S, (n, K), generator=g), torch.zeros(n, dtype=torch.long)
    got = deal(cands, st, rows, 1, 2 * K, fresh)
    with loader.off():
        want = deal(cands, st, rows, 1, 2 * K, fresh)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def _sample() -> None:
    g = torch.Generator().manual_seed(0)
    logits, u = torch.randn(6, 50, generator=g) * 2, torch.rand(6, generator=g)
    got = sample_top_k(logits, 10, u, temperature=0.7, top_p=0.9, scores=True)
    with loader.off():
        want = sample_top_k(logits, 10, u, temperature=0.7, top_p=0.9, scores=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)


CASES: dict[str, Callable[[], None]] = {
    "argmax": _argmax,
    "beam_topk": _beam_topk,
    "copy_rows": _copy_rows,
    "deal": _deal,
    "few_queries": _few_queries,
    "finite": _finite,
    "gather_rows": _gather_rows,
    "int8_rows": _int8_rows,
    "int8_step": _int8_step,
    "layer_norm": _layer_norm,
    "sample": _sample,
}


def test_every_c_file_has_a_case():
    assert sorted(CASES) == sorted(loader.KERNELS), "a C file in csrc without a case here, or a case without one"


@pytest.mark.parametrize("name", loader.KERNELS)
def test_kernel_builds_and_matches_its_fallback(name):
    assert loader.load(name) is not None, loader.status(name)
    assert loader.status(name).startswith("built with"), loader.status(name)
    CASES[name]()
