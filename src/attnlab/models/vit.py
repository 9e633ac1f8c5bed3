"""The Vision Transformer (Dosovitskiy et al. 2021): an image as a sequence of patches, classified by the
Transformer encoder's blocks.

    image (B, C, H, W) -> P = (H/p)(W/p) patches of p x p -> linear (B, P, D) -> [class] + patches (B, 1+P, D)
        + 2-D positions -> N x encoder block (pre-norm) -> LayerNorm -> class token (or mean) -> (B, classes)

The patch embedding is a convolution with kernel = stride = p, which is exactly unfold + one linear
layer shared by every patch. The blocks are the Transformer's own `TransformerEncoderBlock`, so
`record_attention(model)` gives their weights as `blocks.{i}.attention` (B, H, 1+P, 1+P): row 0 is the
class token's attention over itself and the patches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.attention.positions import SCHEMES
from attnlab.models.config import ACTIVATIONS, ConfigMixin
from attnlab.models.transformer_layers import PositionWiseFFN, TransformerEncoderBlock, make_activation

POOLS = ("cls", "mean")


@dataclass
class ViTConfig(ConfigMixin):
    """Hyperparameters of `ViT`; the defaults fit scikit-learn's 8x8 digits."""

    MODEL_TYPE = "vit"

    num_classes: int = 10  # output classes (the data fills it)
    image_height: int = 8  # H in pixels
    image_width: int = 8  # W in pixels
    channels: int = 1  # C: 1 greyscale, 3 RGB
    patch_size: int = 2  # p: each patch is p x p pixels; must divide H and W
    num_hiddens: int = 64  # D, model width
    num_heads: int = 4  # H, attention heads; must divide num_hiddens
    num_layers: int = 2  # N, encoder blocks (0: patches straight to the head)
    ffn_num_hiddens: int = 128  # inner width of the position-wise FFN
    dropout: float = 0.0  # residual, embedding and attention-weight dropout
    positions: str = "learned"  # a position scheme for images: 'learned' table, 'sinusoidal' 2-D (rows, columns)
    pool: str = "cls"  # what the head reads: the class token ('cls') or the mean of the patch tokens ('mean')
    activation: str = "gelu"  # FFN nonlinearity (ViT: gelu)

    def __post_init__(self):
        self.check_positive(
            "num_classes",
            "image_height",
            "image_width",
            "channels",
            "patch_size",
            "num_hiddens",
            "num_heads",
            "ffn_num_hiddens",
        )
        if not isinstance(self.num_layers, int) or self.num_layers < 0:
            raise ValueError(f"ViTConfig.num_layers must be a non-negative integer, got {self.num_layers!r}")
        h, w = self.size
        if h % self.patch_size or w % self.patch_size:
            raise ValueError(
                f"patch size {self.patch_size} does not divide the {h}x{w} images; pick a divisor of both "
                f"(e.g. {_divisors(h, w)})"
            )
        if self.num_hiddens % self.num_heads:
            raise ValueError(
                f"ViTConfig: num_hiddens={self.num_hiddens} is not divisible by num_heads={self.num_heads}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ViTConfig.dropout must lie in [0, 1), got {self.dropout}")
        for name, value, allowed in (
            ("positions", self.positions, image_positions()),
            ("pool", self.pool, POOLS),
            ("activation", self.activation, ACTIVATIONS),
        ):
            if value not in allowed:
                raise ValueError(f"ViTConfig.{name} must be one of {allowed}, got {value!r}")
        SCHEMES[self.positions].check_grid(self.num_hiddens)

    @property
    def size(self) -> tuple[int, int]:
        """(H, W) in pixels."""
        return self.image_height, self.image_width

    @property
    def grid(self) -> tuple[int, int]:
        """Patches per column and per row: (H/p, W/p)."""
        h, w = self.size
        return h // self.patch_size, w // self.patch_size

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid
        return gh * gw


def _divisors(h: int, w: int) -> str:
    return ", ".join(str(d) for d in range(1, min(h, w) + 1) if h % d == 0 and w % d == 0)


def image_positions() -> tuple[str, ...]:
    """The position schemes a ViT takes (those with a form for image patches), by name."""
    return tuple(sorted(name for name, scheme in SCHEMES.items() if scheme.images))


class PatchEmbedding(nn.Module):
    """Cut an image into p x p patches and project each one linearly (one Conv2d of kernel = stride = p).

    Shape: images (B, C, H, W) -> (B, P, D), P = (H/p)(W/p) patches in row-major order.
    """

    def __init__(self, channels: int, patch_size: int, num_hiddens: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(channels, num_hiddens, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, D, H/p, W/p) -> (B, P, D)


class ViT(nn.Module):
    """A Vision Transformer built from a `ViTConfig`.

    Shape: images (B, C, H, W) float -> logits (B, num_classes).

    Examples:
        >>> import torch
        >>> model = ViT(ViTConfig(num_classes=10, patch_size=2, num_hiddens=16, num_heads=2,
        ...                       num_layers=1, ffn_num_hiddens=32))
        >>> model(torch.rand(3, 1, 8, 8)).shape   # (B, classes)
        torch.Size([3, 10])
        >>> model.config.num_patches              # (8/2) x (8/2) patches, plus the class token
        16
    """

    MODEL_TYPE = "vit"
    ATTENTION_KINDS = ("encoder_self",)

    def __init__(self, config: ViTConfig):
        super().__init__()
        if not isinstance(config, ViTConfig):
            raise ValueError(f"ViT expects a ViTConfig, got {type(config).__name__}")
        self.config = c = config
        self.patch_embedding = PatchEmbedding(c.channels, c.patch_size, c.num_hiddens)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.num_hiddens))
        table = SCHEMES[c.positions].grid_table(*c.grid, c.num_hiddens)  # (1, 1+P, D)
        if isinstance(table, nn.Parameter):
            self.pos_embedding = table
        else:  # a function of the config: checkpoints need not carry it
            self.register_buffer("pos_embedding", table, persistent=False)
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            TransformerEncoderBlock(c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.dropout, True, True)
            for _ in range(c.num_layers)
        )
        for m in self.modules():
            if isinstance(m, PositionWiseFFN):
                m.activation = make_activation(c.activation)
        # Pre-norm blocks leave the residual stream un-normalized; with no blocks there is nothing to norm.
        self.norm = nn.LayerNorm(c.num_hiddens) if c.num_layers else nn.Identity()
        self.head = nn.Linear(c.num_hiddens, c.num_classes)

    def attention_kinds(self) -> dict[str, list[nn.Module]]:
        """encoder_self -> every block's self-attention over [class] + patches, in layer order."""
        return {"encoder_self": [b.get_submodule("attention") for b in self.blocks]}

    def tokens(self, images: Tensor) -> Tensor:
        """Images (B, C, H, W) -> the encoder's output (B, 1+P, D), before the head."""
        c = self.config
        if images.dim() != 4 or tuple(images.shape[1:]) != (c.channels, *c.size):
            h, w = c.size
            raise ValueError(f"this ViT takes images of shape (B, {c.channels}, {h}, {w}), got {tuple(images.shape)}")
        X = self.patch_embedding(images)  # (B, P, D)
        X = torch.cat([self.cls_token.expand(X.shape[0], -1, -1), X], dim=1)  # (B, 1+P, D)
        X = self.dropout(X + self.pos_embedding)
        for block in self.blocks:
            X = block(X)
        return self.norm(X)

    def forward(self, images: Tensor) -> Tensor:
        X = self.tokens(images)
        pooled = X[:, 0] if self.config.pool == "cls" else X[:, 1:].mean(dim=1)  # (B, D)
        return self.head(pooled)


__all__ = ["PatchEmbedding", "ViT", "ViTConfig", "image_positions"]
