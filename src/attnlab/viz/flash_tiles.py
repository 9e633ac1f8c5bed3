"""attnlab's Triton FlashAttention stepped through, as the kernel itself computes it under Triton's CPU
interpreter (`attnlab.kernels.flash.flash_trace`): which tiles of queries x keys run and which are skipped,
and the running max m, sum l and output of each query after each key tile."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from torch import Tensor

from attnlab.attention.masking import build_mask
from attnlab.kernels.flash import flash_trace


def plot_flash_tiles(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    valid_lens: Tensor | None = None,
    causal: bool = False,
    tile: int = 4,
    row: int = 0,
    *,
    figsize: tuple[float, float] = (13.0, 3.2),
) -> Figure:
    """Four panels for sentence `row`, head 0: the tiles (skipped: never loaded; run: computed, masked keys
    inside them set to -inf; visible keys), then for the queries of the last query tile, after each key tile
    the kernel ran: the running max m, the running sum l and max |O / l - out|, the distance of the rescaled
    output to the final one (a gap where the tile was skipped). Needs Triton.

    Shape: q (B, H, Lq, D), k, v (B, Hkv, Lk, D), valid_lens (B,) integers.
    """
    out, m, sums, o = flash_trace(q, k, v, valid_lens, causal, tile)
    m, sums, o, final = m[row, 0], sums[row, 0], o[row, 0], out[row, 0]  # (Lq, T), (Lq, T), (Lq, T, D), (Lq, D)
    Lq, T = m.shape
    Lk = k.shape[2]
    visited = ~m.isnan()  # (Lq, T): the trace is NaN where the query's tile skipped the key tile
    visible = build_mask(q.shape[0], Lq, Lk, valid_lens, None, causal, None)
    seen = torch.ones(Lq, Lk, dtype=torch.bool) if visible is None else visible[row, 0].expand(Lq, Lk)
    state = visited.repeat_interleave(tile, dim=1)[:, :Lk].long() + seen.long()  # 0 skipped, 1 run, 2 visible
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(1, 4, width_ratios=[1.2, 1, 1, 1])
    axes[0].imshow(state.numpy(), cmap=ListedColormap(["#dddddd", "#9ecae1", "#08519c"]), vmin=0, vmax=2)
    for edge in range(tile, max(Lq, Lk), tile):
        axes[0].axhline(edge - 0.5, color="white", lw=2)
        axes[0].axvline(edge - 0.5, color="white", lw=2)
    axes[0].set_title("tiles: skipped, run (masked), visible", fontsize="medium")
    axes[0].set_xlabel("key")
    axes[0].set_ylabel("query")
    queries = list(range((Lq - 1) // tile * tile, Lq))  # the last query tile
    ends = np.minimum((np.arange(T) + 1) * tile, Lk)
    err = (o - final[:, None, :]).abs().amax(dim=-1)  # (Lq, T)
    for ax, values, title in zip(axes[1:], (m, sums, err), ("running max m", "running sum l", "max |O/l - out|")):
        for i in queries:
            ax.plot(ends, values[i].numpy(), "o-", ms=3, label=f"query {i}")
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("keys seen")
    axes[1].legend(fontsize="small")
    return fig
