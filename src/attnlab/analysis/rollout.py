"""Where a Vision Transformer looks: the class token's attention over the patches, per layer and head,
and attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

    exp = explain_image(model, image)     # image (C, H, W)
    exp.rollout.shape                     # (H/p, W/p): how much each patch flows into the class token
    exp.class_maps.shape                  # (N, heads, H/p, W/p): each head's class-token row, per layer

Rollout multiplies the layers' head-averaged attention, each mixed half-and-half with the identity for
the residual connection and renormalised: R = A_N ... A_1 with A_l = (0.5 W_l + 0.5 I) / rows. Row 0 of
R, without its class-token entry, is the class token's attention traced back to the input patches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.analysis.explanation import group_maps
from attnlab.attention import record_attention
from attnlab.models import ViT


def attention_rollout(layers: Sequence[Tensor] | Tensor, residual: bool = True) -> Tensor:
    """Attention rollout over a stack of self-attention maps.

    Args:
        layers: per layer (B, H, L, L) weights (a list, or one (N, B, H, L, L) tensor), first layer first.
        residual: mix each layer with the identity (0.5 W + 0.5 I), as Abnar & Zuidema do for the
            residual connection; False multiplies the raw head-averaged maps.

    Shape: -> (B, L, L); each row sums to one. No layers: the identity.

    Examples:
        >>> import torch
        >>> w = torch.softmax(torch.randn(2, 1, 3, 4, 4), dim=-1)   # N=2 layers, B=1, H=3, L=4
        >>> attention_rollout(w).sum(-1)
        tensor([[1.0000, 1.0000, 1.0000, 1.0000]])
    """
    layers = list(layers)
    if not layers:
        raise ValueError("attention_rollout needs at least one layer of (B, H, L, L) weights")
    B, _, L, L2 = layers[0].shape
    if L != L2:
        raise ValueError(f"attention rollout needs self-attention maps (B, H, L, L), got {tuple(layers[0].shape)}")
    eye = torch.eye(L, dtype=torch.float64)
    out = eye.expand(B, L, L)
    for w in layers:
        a = w.double().mean(dim=1)  # (B, L, L), heads averaged
        if residual:
            a = 0.5 * a + 0.5 * eye
        a = a / a.sum(dim=-1, keepdim=True).clamp_min(1e-12)
        out = a @ out  # later layers mix what earlier ones gathered
    return out.float()


@dataclass
class ImageExplanation:
    """One image's classification and its attention.

    image: (C, H, W) the input; label: the predicted class index; probs: (classes,) softmax.
    maps: (N, heads, 1+P, 1+P) every layer's self-attention (token 0 = the class token).
    class_maps: (N, heads, gh, gw) the class token's attention over the patches (rows sum to one
        together with its weight on itself, so these alone sum to at most one).
    rollout: (gh, gw) attention rollout from the class token to each patch.
    """

    image: Tensor
    label: int
    probs: Tensor
    maps: Tensor
    class_maps: Tensor
    rollout: Tensor


def explain_image(model: ViT, image: Tensor) -> ImageExplanation:
    """Classify one image (C, H, W) with a `ViT` and record its attention (`record_attention`)."""
    grid = model.config.grid
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), record_attention(model) as rec:
            logits = model(image[None].to(next(model.parameters()).device))
    finally:
        model.train(was_training)
    probs = torch.softmax(logits[0].float(), dim=-1).cpu()
    if not model.config.num_layers:
        raise ValueError("this ViT has no attention blocks (num_layers=0): there is no attention to draw")
    maps = group_maps(model, rec)["encoder_self"].cpu()  # (N, heads, 1+P, 1+P)
    class_maps = maps[:, :, 0, 1:].reshape(*maps.shape[:2], *grid)
    rollout = attention_rollout(maps[:, None])[0, 0, 1:].reshape(grid)
    return ImageExplanation(image.cpu(), int(probs.argmax()), probs, maps, class_maps, rollout)


__all__ = ["ImageExplanation", "attention_rollout", "explain_image"]
