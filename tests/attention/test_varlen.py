"""The varlen backend (`attnlab.attention.varlen`): SDPA on nested jagged tensors with each sentence's valid keys
packed equals `MultiHeadAttention`'s explicit math path in float32 at 1e-5, outputs and gradients, whatever the
lengths (all full, one short, an empty sentence, one sentence), with grouped-query heads and with more or fewer
queries than keys; its dropout is SDPA's; causal attention never reaches it."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

from attnlab.attention import MultiHeadAttention, masked_attention
from attnlab.attention import backends as backends_module
from attnlab.attention.backends import ENV, backend_for

# (B, H, Hkv, Lq, Lk, valid_lens): every query of sentence b sees keys [0, valid_lens[b])
CASES = {
    "all full": (3, 2, 2, 6, 6, [6, 6, 6]),
    "one short": (3, 2, 2, 6, 6, [6, 2, 6]),
    "an empty sentence": (3, 2, 2, 6, 6, [4, 0, 6]),
    "one sentence": (1, 2, 2, 5, 5, [3]),
    "grouped-query heads": (3, 4, 2, 7, 7, [7, 1, 4]),
    "one KV head": (2, 4, 1, 5, 5, [2, 5]),
    "fewer queries than keys": (2, 2, 1, 3, 9, [9, 4]),
    "more queries than keys": (2, 2, 2, 8, 3, [1, 3]),
}


def varlen(q, k, v, lens, dropout_p=0.0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # on the CPU NJT SDPA warns that strided nested tensors are a prototype
        return masked_attention(q, k, v, lens, dropout_p=dropout_p, backend="varlen")


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_varlen_equals_the_math_path(case):
    B, H, Hkv, Lq, Lk, lens = CASES[case]
    D = 8
    torch.manual_seed(len(case))
    mha = MultiHeadAttention(H * D, H, num_kv_heads=Hkv)
    q = torch.randn(B, H, Lq, D, requires_grad=True)
    k, v = (torch.randn(B, Hkv, Lk, D, requires_grad=True) for _ in range(2))
    lens = torch.tensor(lens)
    out = varlen(q, k, v, lens)
    want, _ = mha._math(q, k, v, lens, None, False)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(out)
    got, ref = torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(want, (q, k, v), grad)
    for name, a, b in zip("qkv", got, ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"d{name}: {m}")


def test_padded_queries_see_the_valid_keys_and_an_empty_sentence_gives_zeros():
    # The contract masks keys only: a query past its sentence's length still attends to the valid keys.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 4, 8) for _ in range(3))
    out = varlen(q, k, v, torch.tensor([2, 0]))
    alone = torch.nn.functional.scaled_dot_product_attention(q[:1], k[:1, :, :2], v[:1, :, :2])
    torch.testing.assert_close(out[:1], alone, atol=1e-6, rtol=1e-6)
    assert out[0, :, 2:].abs().sum() > 0 and torch.equal(out[1], torch.zeros_like(out[1]))


def test_varlen_drops_out_as_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    lens = torch.tensor([5, 0])
    plain = varlen(q, k, v, lens)
    torch.manual_seed(1)
    first = varlen(q, k, v, lens, dropout_p=0.5)
    torch.manual_seed(1)
    again = varlen(q, k, v, lens, dropout_p=0.5)
    assert torch.equal(first, again) and not torch.allclose(first[0], plain[0])
    assert torch.equal(first[1], torch.zeros_like(first[1]))  # an empty sentence stays zeros under dropout


def test_causal_attention_never_takes_varlen(monkeypatch):
    on_cuda = types.SimpleNamespace(device=torch.device("cuda"), requires_grad=False)  # the choice, not a kernel
    lens = torch.tensor([3])
    monkeypatch.setenv(ENV, "varlen")
    assert backend_for(on_cuda, lens, False) == "varlen"
    assert backend_for(on_cuda, lens, True) == "sdpa"
    assert backend_for(on_cuda, None, True) == "sdpa"
    monkeypatch.delenv(ENV)
    monkeypatch.setattr(backends_module, "CUDA_BACKEND", dict.fromkeys(backends_module.CUDA_BACKEND, "varlen"))
    assert backend_for(on_cuda, lens, False) == "varlen"
    assert backend_for(on_cuda, lens, True) == "sdpa"
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match="the varlen backend masks padded keys only, not causal attention"):
        masked_attention(q, q, q, lens, causal=True, backend="varlen")


def test_varlen_checks_the_lengths_as_sdpa_does():
    q = torch.randn(2, 1, 3, 4)
    for lens in ([4, 1], [-1, 2]):
        with pytest.raises(ValueError, match=r"valid_lens must lie in \[0, 3\]"):
            varlen(q, q, q, torch.tensor(lens))
