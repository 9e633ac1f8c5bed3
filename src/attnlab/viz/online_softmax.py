"""FlashAttention's online softmax, one key block at a time: the running max m, the running sum l and the
output O / l of one query block after each key block (`attnlab.attention.online_softmax_steps`)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import Tensor

from attnlab.attention import online_softmax_steps


def plot_online_softmax(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_size: int = 4,
    mask: Tensor | None = None,
    causal: bool = False,
    *,
    figsize: tuple[float, float] = (10.0, 3.2),
) -> Figure:
    """Three panels for the queries q (one query block) of head 0 of batch row 0, x = keys seen so far:
    m (each query a line; it only grows), l (rescaled down whenever m jumps) and the error of O / l
    against exact attention (0 once every key block is in).

    Shape: q (B, H, Lq, Dh), k (B, H, Lk, Dh), v (B, H, Lk, Dv); mask bool broadcastable to
    (B, H, Lq, Lk), True = may attend.

    Examples:
        >>> import torch
        >>> fig = plot_online_softmax(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 10, 4), torch.randn(1, 1, 10, 4))
        >>> [ax.get_title() for ax in fig.axes]
        ['running max m', 'running sum l', 'max |O/l - softmax(s)V|']
    """
    Lq, Lk = q.shape[2], k.shape[2]
    states = list(online_softmax_steps(q, k, v, mask, block_size, causal, q_start=Lk - Lq))
    if mask is not None:
        exact_mask = mask
    elif causal:
        exact_mask = torch.arange(Lk)[None, :] <= torch.arange(Lk - Lq, Lk)[:, None]
    else:
        exact_mask = None
    exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=exact_mask)[0, 0]
    ends = np.array([s.end for s in states])
    m = np.stack([s.m[0, 0, :, 0].numpy() for s in states])  # (steps, Lq)
    l = np.stack([s.l[0, 0, :, 0].numpy() for s in states])  # noqa: E741
    err = np.stack([(s.output[0, 0] - exact).abs().amax(dim=-1).numpy() for s in states])
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, values, title in zip(axes, (m, l, err), ("running max m", "running sum l", "max |O/l - softmax(s)V|")):
        for i in range(values.shape[1]):
            ax.plot(ends, values[:, i], "o-", ms=3, label=f"query {i}")
        ax.set_title(title)
        ax.set_xlabel("keys seen")
    axes[0].legend(fontsize="small")
    return fig
