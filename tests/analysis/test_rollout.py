"""Attention rollout and the class token's maps of a ViT."""

from __future__ import annotations

import torch

from attnlab.analysis.rollout import attention_rollout, explain_image
from attnlab.models import ViT, ViTConfig
from attnlab.viz.images import image_attention_figures, upsample


def _maps(N=3, B=2, H=4, L=5):
    torch.manual_seed(0)
    return [torch.softmax(torch.randn(B, H, L, L), dim=-1) for _ in range(N)]


def test_rollout_is_the_product_of_residual_mixed_head_means():
    layers = _maps()
    eye = torch.eye(5, dtype=torch.float64)
    expected = eye
    for w in layers:
        a = 0.5 * w.double().mean(1) + 0.5 * eye
        expected = (a / a.sum(-1, keepdim=True)) @ expected
    out = attention_rollout(layers)
    torch.testing.assert_close(out, expected.float())
    torch.testing.assert_close(out.sum(-1), torch.ones(2, 5))


def test_one_layer_without_residual_is_the_head_average():
    (w,) = _maps(N=1)
    torch.testing.assert_close(attention_rollout([w], residual=False), w.mean(1))


def test_explain_image_gives_class_token_maps_and_rollout_over_the_grid():
    torch.manual_seed(0)
    model = ViT(ViTConfig(patch_size=2, num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=32))
    exp = explain_image(model, torch.rand(1, 8, 8))
    assert exp.maps.shape == (2, 2, 17, 17) and exp.class_maps.shape == (2, 2, 4, 4)
    assert exp.rollout.shape == (4, 4)
    # The class token's row: its weight on itself plus the patches' is one.
    torch.testing.assert_close(exp.class_maps.sum((-1, -2)) + exp.maps[:, :, 0, 0], torch.ones(2, 2))
    assert 0 < float(exp.rollout.sum()) < 1
    assert [name for name, _ in image_attention_figures(exp)] == ["rollout", "class_token_heads"]
    assert upsample(exp.rollout, 8, 8).shape == (8, 8)
