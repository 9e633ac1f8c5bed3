"""What a position scheme adds to one head, as a Figure, drawn as the scheme's `view` says: score-bias
heatmaps (ALiBi, T5) or rotation angles (RoPE).

Takes the plain dict `attnlab.analysis.positions.position_maps` builds (also GET /api/positions's body).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attnlab.attention.positions import SCHEMES

TITLES = {"encoder_self": "encoder self-attention", "decoder_self": "decoder self-attention (causal)"}


def plot_position_maps(maps: dict, head: int = 0, figsize: tuple[float, float] = (8.0, 3.4)) -> Figure:
    """What the scheme's `view` draws (`attnlab.attention.positions`): "bias" (alibi, t5), one heatmap per
    self-attention kind of head `head`'s bias (queries x keys, hidden keys blank); "angles" (rope), the angle
    pos * theta_f mod 2*pi of each feature pair f (columns) at each position (rows), a cyclic colour map;
    other schemes: a note that nothing is added per head.

    Examples:
        >>> fig = plot_position_maps({"scheme": "alibi", "num_heads": 1, "slopes": [0.5],
        ...     "encoder_self": [[[0.0, -0.5], [-0.5, 0.0]]], "decoder_self": [[[0.0, None], [-0.5, 0.0]]]})
        >>> len(fig.axes)   # two heatmaps, two colour bars
        4
    """
    scheme = SCHEMES.get(maps.get("scheme") or "")
    view = scheme.view if scheme is not None else None
    fig = Figure(figsize=figsize, layout="constrained")
    if view == "bias":
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
        fig.suptitle(scheme.caption(maps, head), fontsize=10)  # type: ignore[union-attr]
    elif view == "angles":
        ax = fig.subplots()
        angles = np.asarray(maps["angles"], dtype=float)  # (L, rot/2)
        im = ax.imshow(np.mod(angles, 2 * np.pi), cmap="twilight", aspect="auto", vmin=0, vmax=2 * np.pi)
        ax.set_xlabel("feature pair f (theta_f = base^(-2f / rot_dim))")
        ax.set_ylabel("position")
        fig.colorbar(im, ax=ax, label="angle mod 2π (radians)")
        _integer_ticks(ax)
        fig.suptitle(scheme.caption(maps, head), fontsize=10)  # type: ignore[union-attr]
    else:
        ax = fig.subplots()
        ax.axis("off")
        ax.text(0.5, 0.5, f"positions: {maps.get('scheme')}: nothing is added per head", ha="center", va="center")
    return fig


def _integer_ticks(ax) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


__all__ = ["plot_position_maps"]
