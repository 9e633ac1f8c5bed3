"""What a translator's position scheme adds to each head's attention, as plain numbers and as a figure.

    maps = position_maps(translator.model, source_len=5, target_len=4)   # what GET /api/positions returns
    position_figure(translator.model, head=2, source_len=5, target_len=4)  # a matplotlib Figure, for notebooks

Each scheme says what it shows (`PositionScheme.maps`, in its module of `attnlab.attention.positions`):
- alibi: the fixed bias -slope_h * |i - j| of each head (`slopes`), per self-attention kind, for these lengths;
- t5: the learned bias of each head's bucket for (query i, key j), one table per stack (`T5RelativeBias`);
- rope: the rotation angle pos * theta_f of every feature pair f at every position (the same for all heads:
  RoPE has no per-head parameter), `inv_freq` the theta_f;
- sinusoidal, learned, none: the scheme's name only (nothing is added per head).

Biases are those of every configured head (before any head pruning); the decoder's causal mask hides
keys after the query, which come back as None (JSON null).
"""

from __future__ import annotations

from matplotlib.figure import Figure

from attnlab.analysis.explanation import attention_layout
from attnlab.attention.positions import get_scheme
from attnlab.viz.positions import plot_position_maps


def position_maps(model, source_len: int, target_len: int) -> dict:
    """The position scheme of `model` and, for alibi / t5 / rope, what it adds per head for a source of
    `source_len` tokens and an output of `target_len` (see the module's docstring).

    Keys: scheme (str | None), num_heads (int | None); alibi: slopes (H,); alibi / t5: encoder_self
    (H, S, S), decoder_self (H, T, T); t5: num_buckets, max_distance; rope: rot_dim, base, inv_freq
    (rot_dim / 2,), angles (max(S, T), rot_dim / 2) in radians.

    Examples:
        >>> from attnlab.models import Transformer, TransformerConfig
        >>> m = Transformer(TransformerConfig(8, 8, num_hiddens=8, num_heads=2, num_layers=1, positions="alibi"))
        >>> maps = position_maps(m, 3, 2)
        >>> maps["slopes"], maps["encoder_self"][0][0]
        ([0.0625, 0.00390625], [0.0, -0.0625, -0.125])
    """
    if source_len < 1 or target_len < 1:
        raise ValueError(f"position maps need lengths of at least 1, got source {source_len}, target {target_len}")
    scheme, num_heads, _ = attention_layout(model)
    out: dict = {"scheme": scheme, "num_heads": num_heads}
    if scheme is not None:
        out.update(get_scheme(scheme).maps(model, source_len, target_len))
    return out


def position_numbers(model, source_len: int, target_len: int) -> int:
    """How many numbers `position_maps` returns for these lengths (a server bounds its answer with it):
    H x (S² + T²) biases for alibi / t5, max(S, T) x rot_dim / 2 angles for rope, none otherwise."""
    scheme = attention_layout(model)[0]
    return 0 if scheme is None else get_scheme(scheme).numbers(model, source_len, target_len)


def position_figure(model, head: int = 0, source_len: int = 8, target_len: int = 8) -> Figure:
    """A matplotlib Figure of what `model`'s positions add to `head`: the ALiBi or T5 bias heatmaps
    (encoder and decoder self-attention), the RoPE angle of each feature pair at each position, or a
    note naming a scheme that adds nothing per head (`attnlab.viz.plot_position_maps`)."""
    return plot_position_maps(position_maps(model, source_len, target_len), head)


__all__ = ["position_figure", "position_maps", "position_numbers"]
