"""The one dispatch point of masked attention (`attnlab.attention.backends`): every backend that runs on the
CPU (SDPA with the bool mask, FlexAttention eagerly, the Triton kernel under the interpreter) equals
`MultiHeadAttention`'s math path in float32 at 1e-5, outputs and gradients (FlexAttention has no CPU
backward); the choice is settable and checked; on the CPU the module never reaches the dispatch."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

from attnlab.attention import MultiHeadAttention, masked_attention
from attnlab.attention import multihead as multihead_module
from attnlab.attention.backends import ENV, backend_for

HAS_TRITON = importlib.util.find_spec("triton") is not None
CPU_BACKENDS = ["sdpa", "flex", pytest.param("flash", marks=pytest.mark.skipif(not HAS_TRITON, reason="no triton"))]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_every_backend_equals_the_math_path(backend):
    torch.manual_seed(len(backend))
    B, H, Hkv, L, D = 3, 2, 1, 11, 8
    mha = MultiHeadAttention(H * D, H, num_kv_heads=Hkv)
    q = torch.randn(B, H, L, D, requires_grad=backend != "flex")
    k, v = (torch.randn(B, Hkv, L, D, requires_grad=backend != "flex") for _ in range(2))
    lens, causal = torch.tensor([11, 0, 5]), True  # a padded sentence, an empty one, and the causal triangle
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention on the CPU warns that it is unoptimised
        out = masked_attention(q, k, v, lens, causal, backend=backend)
    want, _ = mha._math(q, k, v, lens, None, causal)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    if backend != "flex":
        grad = torch.randn_like(out)
        got, ref = torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(want, (q, k, v), grad)
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_the_choice_is_sdpa_on_the_cpu_and_a_bad_setting_is_one_line(monkeypatch):
    q = torch.randn(1, 1, 3, 4)
    monkeypatch.setenv(ENV, "flash")
    assert backend_for(q, None, True) == "sdpa"  # the setting picks among CUDA kernels only
    monkeypatch.setenv(ENV, "flashy")
    with pytest.raises(ValueError, match=r"ATTNLAB_ATTENTION must be one of sdpa, flex, flash, varlen, got 'flashy'"):
        backend_for(q, None, True)
    monkeypatch.delenv(ENV)
    with pytest.raises(ValueError, match="backend must be one of"):
        masked_attention(q, q, q, backend="xformers")


def test_the_module_keeps_its_cpu_paths(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("MultiHeadAttention reached the CUDA dispatch on the CPU")

    monkeypatch.setattr(multihead_module, "masked_attention", refuse)
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    mha(x, x, x, valid_lens=torch.tensor([5, 2]))
    mha(x, x, x, causal=True)
    mha(x, x, x, valid_lens=torch.tensor([5, 0]), causal=True)


@pytest.mark.parametrize("backend", ["flash", "flex"])
def test_a_backend_without_dropout_refuses_it(backend):
    q = torch.randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match=f"the {backend} backend has no attention dropout, got dropout_p=0.1"):
        masked_attention(q, q, q, torch.tensor([2]), dropout_p=0.1, backend=backend)
