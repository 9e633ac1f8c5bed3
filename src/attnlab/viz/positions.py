"""What a position scheme adds to one head, as a Figure: ALiBi / T5 bias heatmaps or RoPE's angles.

Takes the plain dict `attnlab.analysis.positions.position_maps` builds (also GET /api/positions's body).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

TITLES = {"encoder_self": "encoder self-attention", "decoder_self": "decoder self-attention (causal)"}


def plot_position_maps(maps: dict, head: int = 0, figsize: tuple[float, float] = (8.0, 3.4)) -> Figure:
    """alibi / t5: one heatmap per self-attention kind of head `head`'s bias (queries x keys, hidden keys
    blank); rope: the angle pos * theta_f mod 2*pi of each feature pair f (columns) at each position (rows),
    a cyclic colour map; other schemes: a note that nothing is added per head.

    Examples:
        >>> fig = plot_position_maps({"scheme": "alibi", "num_heads": 1, "slopes": [0.5],
        ...     "encoder_self": [[[0.0, -0.5], [-0.5, 0.0]]], "decoder_self": [[[0.0, None], [-0.5, 0.0]]]})
        >>> len(fig.axes)   # two heatmaps, two colour bars
        4
    """
    scheme = maps.get("scheme")
    fig = Figure(figsize=figsize, layout="constrained")
    if scheme in ("alibi", "t5"):
        H = len(maps["encoder_self"])
        if not 0 <= head < H:
            raise ValueError(f"head must be in 0..{H - 1} (the model's heads), got {head}")
        axes = fig.subplots(1, 2)
        for ax, kind in zip(axes, ("encoder_self", "decoder_self")):
            M = np.array([[np.nan if v is None else v for v in row] for row in maps[kind][head]], dtype=float)
            im = ax.imshow(M, cmap="viridis")
            ax.set_title(TITLES[kind], fontsize=9)
            ax.set_xlabel("key position")
            ax.set_ylabel("query position")
            fig.colorbar(im, ax=ax, shrink=0.8)
            _integer_ticks(ax)
        what = (
            f"slope {maps['slopes'][head]:.4g}: bias = -slope * |i - j|" if scheme == "alibi" else "learned bucket bias"
        )
        fig.suptitle(f"{scheme} · head {head + 1} · {what}", fontsize=10)
    elif scheme == "rope":
        ax = fig.subplots()
        angles = np.asarray(maps["angles"], dtype=float)  # (L, rot/2)
        im = ax.imshow(np.mod(angles, 2 * np.pi), cmap="twilight", aspect="auto", vmin=0, vmax=2 * np.pi)
        ax.set_xlabel("feature pair f (theta_f = base^(-2f / rot_dim))")
        ax.set_ylabel("position")
        fig.colorbar(im, ax=ax, label="angle mod 2π (radians)")
        _integer_ticks(ax)
        fig.suptitle(f"rope · rot_dim {maps['rot_dim']}, base {maps['base']:g} · every head alike", fontsize=10)
    else:
        ax = fig.subplots()
        ax.axis("off")
        ax.text(0.5, 0.5, f"positions: {scheme}: nothing is added per head", ha="center", va="center")
    return fig


def _integer_ticks(ax) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


__all__ = ["plot_position_maps"]
