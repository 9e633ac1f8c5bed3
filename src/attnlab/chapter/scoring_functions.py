"""Attention scoring functions: why dot products are divided by sqrt(d_k) — the variance of the scores,
the saturation of the softmax and its vanishing gradient, measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attnlab.chapter.result import ChapterResult
from attnlab.viz.plots import plot_scaling


# --------------------------------------------------------------------------- scaling
def softmax_jacobian_norm(p: torch.Tensor) -> torch.Tensor:
    """||diag(p) - p p^T||_F over the last axis, in closed form (no (n, n) matrix).

    ||J||_F^2 = sum_i p_i^2 - 2 sum_i p_i^3 + (sum_i p_i^2)^2.   p (..., n) -> (...)
    """
    s2 = (p**2).sum(-1)
    return (s2 - 2 * (p**3).sum(-1) + s2**2).clamp_min(0).sqrt()


def scaling_stats(
    dims: Sequence[int] = (8, 32, 64, 128, 512),
    samples: int = 1000,
    num_keys: int = 64,
    seed: int = 0,
    chunk: int = 256,
) -> dict[str, list[float]]:
    """Monte-Carlo statistics of q.k for q, k ~ N(0, I_{d_k}), unscaled vs divided by sqrt(d_k).

    For each d_k: `samples` queries, each against `num_keys` keys. Returns lists (one per d_k):
    var_unscaled, var_scaled, maxw_unscaled, maxw_scaled (mean largest softmax weight),
    jac_unscaled, jac_scaled (mean Frobenius norm of the softmax Jacobian).
    """
    if samples < 1 or num_keys < 2 or any(d < 1 for d in dims):
        raise ValueError(
            f"need samples >= 1, num_keys >= 2 and positive dims; got samples={samples},"
            f" num_keys={num_keys}, dims={list(dims)}"
        )
    g = torch.Generator().manual_seed(seed)
    out: dict[str, list[float]] = {
        k: [] for k in ("var_unscaled", "var_scaled", "maxw_unscaled", "maxw_scaled", "jac_unscaled", "jac_scaled")
    }
    for d in dims:
        scores, maxw, jac = [], {True: 0.0, False: 0.0}, {True: 0.0, False: 0.0}
        for start in range(0, samples, chunk):  # chunks bound memory at d_k = 512
            b = min(chunk, samples - start)
            q = torch.randn(b, 1, d, generator=g, dtype=torch.float64)
            k = torch.randn(b, num_keys, d, generator=g, dtype=torch.float64)
            s = (q * k).sum(-1)  # (b, num_keys)
            scores.append(s)
            for scaled in (False, True):
                p = torch.softmax(s / math.sqrt(d) if scaled else s, dim=-1)
                maxw[scaled] += float(p.max(-1).values.sum())
                jac[scaled] += float(softmax_jacobian_norm(p).sum())
        s = torch.cat(scores)
        out["var_unscaled"].append(float(s.var()))
        out["var_scaled"].append(float((s / math.sqrt(d)).var()))
        for scaled, tag in ((False, "unscaled"), (True, "scaled")):
            out[f"maxw_{tag}"].append(maxw[scaled] / samples)
            out[f"jac_{tag}"].append(jac[scaled] / samples)
    return out


def scaling(
    dims: Sequence[int] = (8, 32, 64, 128, 512), samples: int = 1000, num_keys: int = 64, seed: int = 0
) -> ChapterResult:
    """Table, figure and explanation of the 1/sqrt(d_k) in scaled dot-product attention."""
    st = scaling_stats(dims, samples, num_keys, seed)
    rows = [
        [
            d,
            st["var_unscaled"][i],
            st["var_scaled"][i],
            st["maxw_unscaled"][i],
            st["maxw_scaled"][i],
            st["jac_unscaled"][i],
            st["jac_scaled"][i],
        ]
        for i, d in enumerate(dims)
    ]
    headers = ["d_k", "Var(q.k)", "Var(q.k/sqrt d_k)", "max weight", "max weight (scaled)", "|J|_F", "|J|_F (scaled)"]
    i = len(dims) - 1
    paragraph = (
        f"With q and k drawn from N(0, 1), q.k is a sum of d_k unit-variance products, so its "
        f"variance grows like d_k (measured {st['var_unscaled'][i]:.1f} at d_k={dims[i]}). Over "
        f"{num_keys} keys such spread-out scores saturate the softmax: the largest weight averages "
        f"{st['maxw_unscaled'][i]:.3f}, close to one-hot. The softmax's Jacobian diag(p) - p p^T "
        f"goes to 0 as p approaches one-hot, and its mean Frobenius norm falls with d_k (from "
        f"{st['jac_unscaled'][0]:.3f} at d_k={dims[0]} to {st['jac_unscaled'][i]:.3f}), so ever "
        f"less gradient reaches the queries and keys. Dividing by sqrt(d_k) restores unit variance "
        f"({st['var_scaled'][i]:.2f}), a largest weight of {st['maxw_scaled'][i]:.3f} and a "
        f"Jacobian norm of {st['jac_scaled'][i]:.3f} at d_k={dims[i]} (between "
        f"{min(st['jac_scaled']):.3f} and {max(st['jac_scaled']):.3f} over all d_k here): the "
        f"softmax stays in its sensitive range and gradients stay alive."
    )
    fig = plot_scaling(
        dims,
        {
            "variance of scores": {"q.k": st["var_unscaled"], "q.k / sqrt(d_k)": st["var_scaled"]},
            "mean largest softmax weight": {"unscaled": st["maxw_unscaled"], "scaled": st["maxw_scaled"]},
            "mean softmax Jacobian norm": {"unscaled": st["jac_unscaled"], "scaled": st["jac_scaled"]},
        },
    )
    fig.axes[0].set_yscale("log")
    return ChapterResult(
        "Why scale by 1/sqrt(d_k)",
        paragraph,
        tables=[(headers, rows)],
        figures={"scaling": fig},
        data={"dims": list(dims), **st},
    )
