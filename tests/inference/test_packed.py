"""Linear layers on oneDNN-reordered weights: F.linear's results, kept in step with the weights, and
a decoding model that gives the same tokens."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.inference.packed import (
    MIN_WORK,
    ONEDNN,
    PackedLinear,
    can_pack,
    linear,
    pack_linears,
    pack_weight,
    packable,
    retype_linears,
)
from attnlab.inference.precision import prepare_for_inference
from attnlab.models import Transformer, TransformerConfig

pytestmark = pytest.mark.skipif(not ONEDNN, reason="this PyTorch build has no oneDNN")


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


def _layer(K=48, N=160, bias=True, seed=0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(K, N, bias=bias)


@pytest.mark.parametrize("rows", [1, 7, 64, 300])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_gives_f_linear_results(rows, bias):
    layer = _layer(bias=bias)
    weight = layer.weight
    packed = retype_linears(layer, nn.Linear, PackedLinear)
    assert packed is layer and type(layer) is PackedLinear and layer.weight is weight  # in place
    x = torch.randn(rows, 3, 48)
    with torch.inference_mode():
        want, got = F.linear(x, layer.weight, layer.bias), packed(x)
        assert packable(x, layer.weight) == (rows * 3 * 160 >= MIN_WORK)
    assert not packable(x, layer.weight)  # autograd on: F.linear
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_packed_weight_follows_the_weight_in_place_replaced_and_converted():
    packed = retype_linears(_layer(), nn.Linear, PackedLinear)
    x = torch.randn(64, 48)
    with torch.inference_mode():
        first = packed.packed_weight()
        assert packed.packed_weight() is first  # kept between calls
        with torch.no_grad():
            packed.weight.mul_(2.0)  # in place: the version counter moves
        torch.testing.assert_close(packed(x), F.linear(x, packed.weight, packed.bias), rtol=1e-5, atol=1e-5)
        packed.weight = nn.Parameter(torch.randn(160, 48))  # replaced
        torch.testing.assert_close(packed(x), F.linear(x, packed.weight, packed.bias), rtol=1e-5, atol=1e-5)
        packed.to(torch.float64).to(torch.float32)  # same Parameter, new storage: packed again
        torch.testing.assert_close(packed(x), F.linear(x, packed.weight, packed.bias), rtol=1e-5, atol=1e-5)
        packed.to(torch.bfloat16)  # not packed in bf16: F.linear, bit for bit
        xb = x.bfloat16()
        assert packed.packed_weight() is None and torch.equal(packed(xb), F.linear(xb, packed.weight, packed.bias))


def test_training_autocast_and_copies_see_a_plain_linear():
    layer = retype_linears(_layer(), nn.Linear, PackedLinear)
    layer.packed_weight()
    x = torch.randn(64, 48, requires_grad=True)
    layer(x).sum().backward()  # autograd: F.linear, gradients as usual
    assert layer.weight.grad is not None and x.grad is not None
    with torch.no_grad():
        frozen = torch.randn(64, 48)
        layer.weight.requires_grad_(False)
    with torch.enable_grad():  # only the bias trains: still F.linear, so its gradient exists
        layer(frozen).sum().backward()
    assert layer.bias.grad is not None
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert not packable(frozen, layer.weight) and layer(frozen).dtype == torch.bfloat16  # as nn.Linear
    with torch.inference_mode():
        for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):  # the opaque copy stays behind
            assert "_packed" not in clone.__dict__
            torch.testing.assert_close(clone(frozen), layer(frozen), rtol=1e-5, atol=1e-5)
        made_here = nn.Linear(48, 160)  # an inference tensor has no version counter: never packed
        assert not can_pack(made_here.weight) and torch.equal(
            retype_linears(made_here, nn.Linear, PackedLinear)(frozen),
            F.linear(frozen, made_here.weight, made_here.bias),
        )
    assert layer.state_dict().keys() == nn.Linear(48, 160).state_dict().keys()
    assert linear(frozen, layer.weight, layer.bias, None).shape == (64, 160)  # no packed weight: F.linear
    assert pack_weight(layer.weight).shape == layer.weight.shape


def test_retyping_keeps_the_module_its_hooks_and_ties():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    model[2].weight = model[0].weight  # tied
    seen = []
    model[0].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    first = model[0]
    retype_linears(model, nn.Linear, PackedLinear)
    assert model[0] is first and model[2].weight is model[0].weight
    model(torch.randn(3, 8))
    assert seen == [torch.Size([3, 8])]
    retype_linears(model, PackedLinear, nn.Linear)
    assert type(model[0]) is nn.Linear


def test_the_fused_qkv_weight_is_packed_once_the_projections_are():
    from attnlab.attention import MultiHeadAttention

    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(64, 1, 32)
    with torch.inference_mode():  # as decoding runs
        before = mha(x, x, x)  # the concatenated Q/K/V weight is cached here, unpacked
        assert mha._qkv_cached[-1] is None
        pack_linears(mha, copy=False)
        after = mha(x, x, x)
    assert mha._qkv_cached[-1] is not None  # rebuilt and packed: the projections' type is part of its key
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    assert "_qkv_cached" not in copy.deepcopy(mha).__dict__
    plain = retype_linears(mha, PackedLinear, nn.Linear, copy=True)
    for m in (mha, plain):
        m.prune_heads([1])  # a decoding model pruned in place keeps its kind of layers
    assert type(mha.W_q) is PackedLinear and type(plain.W_q) is nn.Linear
    with torch.no_grad():
        torch.testing.assert_close(mha(x, x, x), plain(x, x, x), rtol=1e-5, atol=1e-5)


def _tiny(**over) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(src_vocab_size=300, tgt_vocab_size=300, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64)
    return Transformer(TransformerConfig(**(cfg | over))).eval()


@pytest.mark.parametrize("over", [{}, {"norm_first": True, "share_embeddings": True}])
def test_a_packed_model_decodes_the_same_tokens(over):
    model = _tiny(**over)
    reference = copy.deepcopy(model)
    fast = prepare_for_inference(model, "fp32")
    assert fast is model  # the same model (and Parameters), its linears packed in place
    assert not any(type(m) is nn.Linear for m in fast.modules())  # every linear packed
    if over.get("share_embeddings"):
        assert fast.decoder.dense.weight is fast.decoder.embedding.weight  # still tied
    torch.manual_seed(1)
    src, lens = torch.randint(3, 300, (40, 9)), torch.randint(2, 10, (40,))
    with torch.inference_mode():
        torch.testing.assert_close(fast(src, src[:, :6], lens), reference(src, src[:, :6], lens), rtol=1e-5, atol=1e-5)
    want = [h.tokens for h in greedy(reference, src, lens, 1, 2, 12)]
    assert [h.tokens for h in greedy(fast, src, lens, 1, 2, 12)] == want


def test_pack_linears_in_place_or_as_a_copy():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    assert type(pack_linears(model)[0]) is PackedLinear and type(model[0]) is nn.Linear
    assert pack_linears(model, copy=False) is model and type(model[2]) is PackedLinear
