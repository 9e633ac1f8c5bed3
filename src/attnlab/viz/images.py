"""Attention drawn on the image: a Vision Transformer's rollout and its class token's per-head maps.

`image_attention_figures(exp)` takes an `attnlab.analysis.rollout.ImageExplanation` and returns
[("rollout", Figure), ("class_token_heads", Figure)]: the patch-level maps are stretched to pixels
(each patch a p x p block) and laid over the greyscale image.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from .heatmaps import to_numpy


def _gray(image) -> np.ndarray:
    """(C, H, W) -> (H, W) for display (the channel mean of an RGB image)."""
    img = to_numpy(image)
    return img.mean(axis=0) if img.ndim == 3 else img


def upsample(patch_map, height: int, width: int) -> np.ndarray:
    """(gh, gw) -> (H, W): each patch's value repeated over its pixels."""
    m = to_numpy(patch_map)
    gh, gw = m.shape
    return np.kron(m, np.ones((height // gh, width // gw)))


def _overlay(ax, image, patch_map, title: str | None = None, alpha: float = 0.55) -> None:
    img = _gray(image)
    ax.imshow(img, cmap="gray_r", interpolation="nearest")
    ax.imshow(upsample(patch_map, *img.shape), cmap="inferno", alpha=alpha, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)


def image_attention_figures(exp, classes: Sequence[str] | None = None) -> list[tuple[str, Figure]]:
    """The figures of one image: rollout beside the image, and a layer x head grid of class-token maps."""
    name = classes[exp.label] if classes is not None else str(exp.label)
    confidence = float(exp.probs[exp.label])
    fig = Figure(figsize=(6, 3), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.imshow(_gray(exp.image), cmap="gray_r", interpolation="nearest")
    left.set_xticks([])
    left.set_yticks([])
    left.set_title(f"predicted {name} ({confidence:.0%})", fontsize=9)
    _overlay(right, exp.image, exp.rollout, "attention rollout")
    figures = [("rollout", fig)]

    N, H = exp.class_maps.shape[:2]
    grid = Figure(figsize=(1.8 * H, 1.8 * N), layout="constrained")
    axes = grid.subplots(N, H, squeeze=False)
    for i in range(N):
        for h in range(H):
            _overlay(axes[i, h], exp.image, exp.class_maps[i, h], f"layer {i + 1}, head {h + 1}")
    grid.suptitle("class token's attention over the patches", fontsize=10)
    figures.append(("class_token_heads", grid))
    return figures


__all__ = ["image_attention_figures", "upsample"]
