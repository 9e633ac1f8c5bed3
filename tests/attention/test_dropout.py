"""`attnlab.attention.Dropout`: nn.Dropout's distribution and gradient from a cheaper CPU mask."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.attention import Dropout, dropout_keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_keep_rate_is_one_minus_p_in_every_lane(p):
    # Each int64 gives 3 lanes of 16 bits; a lane holding the always-zero top bit would never drop.
    torch.manual_seed(0)
    keep, scale = dropout_keep_mask((300_000, 4), p)
    n = keep.numel()
    tol = 5 * (p * (1 - p) / (n / 12)) ** 0.5  # 5 sigma for the smallest group below
    assert abs(keep.float().mean().item() - (1 - p)) < tol
    for lane in range(3):  # positions i % 3 == lane come from the same 16 bits of each word
        assert abs(keep.flatten()[lane::3].float().mean().item() - (1 - p)) < tol
    for col in range(4):
        assert abs(keep[:, col].float().mean().item() - (1 - p)) < tol
    assert scale == pytest.approx(1 / (1 - p), rel=1e-4)


def test_mask_is_not_correlated_between_neighbours():
    torch.manual_seed(1)
    keep, _ = dropout_keep_mask((1_000_000,), 0.5)
    k = keep.float()
    both = (k[1:] * k[:-1]).mean().item()
    assert abs(both - 0.25) < 0.005


def test_matches_nn_dropout_in_expectation_and_scale():
    torch.manual_seed(2)
    x = torch.randn(200, 500)
    y = Dropout(0.2).train()(x)
    assert x.numel() >= Dropout.min_fast_numel
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] * (1 / 0.8), rtol=1e-4)
    assert abs(kept.float().mean().item() - 0.8) < 0.01
    # E[y] = x: the mean over many draws approaches x
    ys = torch.stack([Dropout(0.2).train()(x) for _ in range(400)]).mean(0)
    assert (ys - x).abs().mean() < 0.03


def test_gradient_uses_the_forward_mask():
    torch.manual_seed(3)
    x = torch.randn(256, 256, requires_grad=True)
    y = Dropout(0.3)(x)
    y.sum().backward()
    kept = y.detach() != 0
    assert torch.allclose(x.grad, kept.float() * (65536 / (65536 - round(0.3 * 65536))))


def test_seeded_draws_repeat():
    torch.manual_seed(4)
    a = Dropout(0.1)(torch.ones(300, 300))
    torch.manual_seed(4)
    b = Dropout(0.1)(torch.ones(300, 300))
    assert torch.equal(a, b)


def test_small_tensors_take_nn_dropouts_draws():
    # Under min_fast_numel elements the fixed cost of the cheap mask loses: same draws as nn.Dropout.
    x = torch.randn(64, 32)
    torch.manual_seed(5)
    a = Dropout(0.1)(x)
    torch.manual_seed(5)
    assert torch.equal(a, nn.Dropout(0.1)(x))
    big = torch.randn(256, 256)
    torch.manual_seed(5)
    a = Dropout(0.1)(big)
    torch.manual_seed(5)
    assert not torch.equal(a, nn.Dropout(0.1)(big))


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_edge_probabilities_are_nn_dropouts(p):
    x = torch.randn(8, 8)
    assert torch.equal(Dropout(p)(x), nn.Dropout(p)(x))


def test_eval_inplace_and_odd_sizes():
    x = torch.randn(7, 5)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    y = x.clone()
    Dropout(0.5, inplace=True)(y)  # nn.Dropout's own in-place path
    assert ((y == 0) | torch.isclose(y, 2 * x)).all()
    keep, _ = dropout_keep_mask((1,), 0.5)  # fewer elements than one word's lanes
    assert keep.shape == (1,)
    assert dropout_keep_mask((0, 3), 0.5)[0].shape == (0, 3)
    assert Dropout(0.5)(torch.randn(0, 3)).shape == (0, 3)


def test_bf16_input_keeps_its_dtype():
    x = torch.randn(256, 256, dtype=torch.bfloat16)
    assert Dropout(0.5)(x).dtype == torch.bfloat16


def test_transformer_uses_it():
    from attnlab.models import Transformer, TransformerConfig

    cfg = TransformerConfig(20, 20, num_hiddens=8, num_heads=2, num_layers=1, ffn_num_hiddens=16, dropout=0.1)
    m = Transformer(cfg)
    drops = [type(mod) for mod in m.modules() if isinstance(mod, nn.Dropout)]
    assert drops and all(t is Dropout for t in drops)
