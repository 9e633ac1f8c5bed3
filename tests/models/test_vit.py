"""The Vision Transformer: patch embedding, class token, positions, and its reduction to a linear model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import record_attention
from attnlab.attention.positions import sinusoidal_2d
from attnlab.models import ViT, ViTConfig, build_model
from attnlab.models.vit import PatchEmbedding

pytestmark = pytest.mark.usefixtures("one_thread")


def _vit(**kw) -> ViT:
    base = dict(
        num_classes=5,
        image_height=8,
        image_width=12,
        channels=3,
        patch_size=4,
        num_hiddens=16,
        num_heads=2,
        num_layers=2,
        ffn_num_hiddens=32,
    )
    torch.manual_seed(0)
    return ViT(ViTConfig(**{**base, **kw})).eval()


def test_patch_embedding_is_unfold_then_one_linear_layer():
    model = _vit()
    images = torch.randn(2, 3, 8, 12)
    proj = model.patch_embedding.proj
    patches = F.unfold(images, kernel_size=4, stride=4).transpose(1, 2)  # (B, P, C*p*p), row-major patches
    expected = F.linear(patches, proj.weight.reshape(16, -1), proj.bias)  # (B, P, D)
    torch.testing.assert_close(model.patch_embedding(images), expected, atol=1e-5, rtol=1e-5)
    assert expected.shape == (2, 6, 16)  # (8/4) x (12/4) patches


def test_class_token_attention_rows_sum_to_one_over_itself_and_the_patches():
    model = _vit()
    with record_attention(model) as rec:
        model(torch.randn(3, 3, 8, 12))
    for i in range(2):
        (w,) = rec.weights[f"blocks.{i}.attention"]
        assert w.shape == (3, 2, 7, 7)  # (B, H, 1+P, 1+P)
        torch.testing.assert_close(w[:, :, 0].sum(-1), torch.ones(3, 2))
    assert sorted(model.attention_kinds()) == ["encoder_self"]


def test_one_patch_per_image_and_no_blocks_is_a_linear_model_on_pixels():
    model = _vit(patch_size=4, image_height=4, image_width=4, num_layers=0, pool="mean")
    images = torch.randn(10, 3, 4, 4)
    proj, head = model.patch_embedding.proj, model.head
    W = head.weight @ proj.weight.reshape(16, -1)  # (classes, C*H*W)
    b = head.weight @ (proj.bias + model.pos_embedding[0, 1]) + head.bias
    torch.testing.assert_close(model(images), images.flatten(1) @ W.T + b, atol=1e-5, rtol=1e-5)


def test_sinusoidal_positions_encode_row_and_column():
    P = sinusoidal_2d(2, 3, 8)  # (6, 8): rows in the first half, columns in the second
    assert P.shape == (6, 8)
    torch.testing.assert_close(P[0, :4], P[2, :4])  # patches 0 and 2 share row 0
    torch.testing.assert_close(P[1, 4:], P[4, 4:])  # patches 1 and 4 share column 1
    model = _vit(positions="sinusoidal")
    assert "pos_embedding" not in model.state_dict()  # a function of the config, not a weight
    assert model(torch.randn(1, 3, 8, 12)).shape == (1, 5)


def test_the_position_schemes_give_a_vit_the_tables_of_the_formula():
    """The registry's 2-D sinusoids, written out by hand: features [0, D/2) hold the patch's row, [D/2, D) its
    column, each as interleaved sin(pos / 10000^(2j/(D/2))), cos(...); the class token's row is zero. The learned
    table is drawn as before (std 0.02, after the patch embedding), so a seed gives the same model."""
    model, D = _vit(positions="sinusoidal"), 16
    gh, gw = model.config.grid
    want = torch.zeros(1 + gh * gw, D)
    for r in range(gh):
        for c in range(gw):
            for half, pos in ((0, r), (D // 2, c)):
                for j in range(D // 4):
                    angle = pos / 10000 ** (2 * j / (D // 2))
                    want[1 + r * gw + c, half + 2 * j] = math.sin(angle)
                    want[1 + r * gw + c, half + 2 * j + 1] = math.cos(angle)
    torch.testing.assert_close(model.pos_embedding, want[None])
    learned = _vit()
    torch.manual_seed(0)
    PatchEmbedding(3, 4, D)
    torch.testing.assert_close(learned.pos_embedding.data, torch.randn(1, 1 + gh * gw, D) * 0.02)
    assert "pos_embedding" in learned.state_dict() and learned.pos_embedding.requires_grad
    with pytest.raises(ValueError, match=r"positions must be one of \('learned', 'sinusoidal'\), got 'rope'"):
        ViTConfig(positions="rope")  # a scheme without a form for image patches
    with pytest.raises(ValueError, match="need num_hiddens divisible by 4, got 18"):
        ViTConfig(positions="sinusoidal", num_hiddens=18, num_heads=2)


def test_config_errors_are_one_line():
    with pytest.raises(ValueError, match="patch size 3 does not divide the 8x8 images"):
        ViTConfig(patch_size=3)
    with pytest.raises(ValueError, match="unknown ViTConfig keys"):
        ViTConfig.from_dict({"bogus": 1})
    with pytest.raises(ValueError, match=r"takes images of shape \(B, 3, 8, 12\)"):
        _vit()(torch.randn(1, 1, 8, 8))
    assert isinstance(build_model("vit", {"num_classes": 3}), ViT)
