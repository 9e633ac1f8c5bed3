"""The chapter's demonstrations as plain computations: numbers, tables and Figures, no printing.

Each function returns a `ChapterResult` (title, one paragraph written from the measured numbers,
tables as (headers, rows), named Figures, raw data). The CLI commands print and save it; the demo
turns it into a report `Section` with `result.save(out_dir)`.

- `kernel_regression`     Nadaraya–Watson: average pooling, fixed kernels, learned width.
- `positional_encoding`   the sinusoids, the binary-counting analogy, PE(pos+k) = M_k PE(pos).
- `scaling`               why dot products are divided by sqrt(d_k): variance, saturation, gradients.
- `params`                parameter counts (single vs multi-head, FFN, whole Transformer), complexity.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from attnlab import viz
from attnlab.report import Section

__all__ = [
    "ChapterResult",
    "kernel_regression",
    "positional_encoding",
    "rotation_matrix",
    "sinusoid_reference",
    "scaling",
    "scaling_stats",
    "softmax_jacobian_norm",
    "attention_param_table",
    "ffn_param_table",
    "transformer_param_table",
    "complexity_table",
    "params",
    "TRANSFORMER_SETTINGS",
    "count_parameters",
]


@dataclass
class ChapterResult:
    """What one demonstration produced."""

    title: str
    paragraph: str
    tables: list[tuple[list[str], list[list]]] = field(default_factory=list)
    figures: dict[str, Figure] = field(default_factory=dict)  # file stem -> Figure
    pre: str = ""  # preformatted text shown under the tables
    data: dict = field(default_factory=dict)  # raw measurements, for tests and callers

    def save(self, out_dir: str | os.PathLike, formats: Sequence[str] = ("png", "svg")) -> Section:
        """Save every figure as out_dir/<name>.<fmt>; return a report Section linking the first format."""
        paths = [viz.save_figure(fig, Path(out_dir) / name, formats)[0] for name, fig in self.figures.items()]
        return Section(self.title, self.paragraph, figures=paths, tables=self.tables, pre=self.pre)


def _mse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.detach() - b) ** 2).mean())


# --------------------------------------------------------------------------- kernel regression
def kernel_regression(
    seed: int = 0,
    bandwidth: float = 1.0,
    epochs: int = 5,
    lr: float = 0.5,
    n_train: int = 50,
    kernels: Sequence[str] = ("gaussian", "boxcar", "epanechnikov"),
) -> ChapterResult:
    """Nadaraya–Watson on the book's data: test MSE against the noise-free truth for every method.

    The learned model's initial width is drawn from U(0, 1) as in the book, but with a private
    generator seeded by `seed`, so the global RNG is untouched and the run is reproducible.
    """
    from attnlab.models.kernel_regression import NadarayaWatson, NWKernelRegression, average_pooling, fit, make_data

    x_train, y_train, x_test, y_truth = make_data(seed=seed, n_train=n_train)
    preds = {"average pooling": average_pooling(x_test, x_train, y_train)}
    rows: list[list[Any]] = [["average pooling", "constant", "-", _mse(preds["average pooling"], y_truth)]]
    weights = []
    for k in kernels:
        pred, w = NadarayaWatson(bandwidth, k)(x_test, x_train, y_train, return_weights=True)
        preds[k] = pred
        weights.append(w)
        rows.append(["nonparametric", k, bandwidth, _mse(pred, y_truth)])

    w0 = float(torch.rand(1, generator=torch.Generator().manual_seed(seed)))
    model = NWKernelRegression(w=w0)
    losses = fit(model, x_train, y_train, lr=lr, epochs=epochs)
    with torch.no_grad():
        learned, learned_w = model(x_test, x_train, y_train, return_weights=True)
    w = float(model.w.detach())
    learned_mse = _mse(learned, y_truth)
    rows.append(["parametric", "gaussian, learned", 1 / abs(w) if w else float("inf"), learned_mse])

    figs = {
        "predictions": viz.plot_kernel_regression(
            x_test, y_truth, preds, x_train, y_train, title=f"nonparametric, bandwidth {bandwidth:g}"
        ),
        "predictions_learned": viz.plot_kernel_regression(
            x_test, y_truth, {f"learned (w={w:.3g})": learned}, x_train, y_train, title="parametric (learned width)"
        ),
        "attention_nonparametric": viz.show_heatmaps(
            torch.stack(weights)[None],
            xlabel="sorted training inputs",
            ylabel="sorted test inputs",
            titles=list(kernels),
        ),
        "attention_parametric": viz.show_heatmaps(
            learned_w[None, None],
            xlabel="sorted training inputs",
            ylabel="sorted test inputs",
            titles=[f"learned w={w:.3g}"],
        ),
    }
    if losses:
        figs["loss"] = viz.plot_loss_curve(losses, ylabel="leave-one-out MSE", title="training the kernel width")
    best = min(rows[1:-1], key=lambda r: r[3]) if len(rows) > 2 else None
    paragraph = (
        f"Attention pooling as kernel regression: each test input (query) averages the noisy "
        f"training targets (values), weighted by a kernel of its distance to the training inputs "
        f"(keys). Average pooling ignores the query and scores test MSE {rows[0][3]:.3f} against "
        f"the noise-free function"
        + (f"; the best fixed kernel at bandwidth {bandwidth:g} ({best[1]}) scores {best[3]:.3f}" if best else "")
        + f". Learning the Gaussian's width by {epochs} epochs of SGD on leave-one-out error gives "
        f"w = {w:.3g} (bandwidth {1 / abs(w) if w else float('inf'):.3g}) and test MSE "
        f"{learned_mse:.3f}; the heatmaps show how a narrower kernel concentrates each query's "
        f"attention on nearby keys."
    )
    return ChapterResult(
        "Nadaraya–Watson kernel regression",
        paragraph,
        tables=[(["method", "kernel", "bandwidth", "test MSE"], rows)],
        figures=figs,
        data={"mse": {r[1] if r[0] == "nonparametric" else r[0]: r[3] for r in rows}, "losses": losses, "w": w},
    )


# --------------------------------------------------------------------------- positional encoding
def sinusoid_reference(num_steps: int, num_hiddens: int) -> torch.Tensor:
    """The paper's formula in float64, written independently of attnlab.attention. (L, D)"""
    pos = torch.arange(num_steps, dtype=torch.float64)[:, None]
    i = torch.arange(0, num_hiddens, 2, dtype=torch.float64)
    angles = pos / 10000 ** (i / num_hiddens)
    P = torch.zeros(num_steps, num_hiddens, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
    return P


def rotation_matrix(k: int, num_hiddens: int) -> torch.Tensor:
    """M_k (D, D), block-diagonal, with PE(pos + k) = M_k PE(pos) for every pos.

    For frequency w_j the pair (sin(w_j p), cos(w_j p)) moves to (sin(w_j (p+k)), cos(w_j (p+k)))
    by the 2x2 rotation [[cos w_j k, sin w_j k], [-sin w_j k, cos w_j k]] — which depends on the
    offset k but not on p: relative positions are linear functions of absolute ones.
    """
    if num_hiddens % 2:
        raise ValueError(f"the rotation property needs an even num_hiddens, got {num_hiddens}")
    w = 1 / 10000 ** (torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens)
    c, s = torch.cos(w * k), torch.sin(w * k)
    M = torch.zeros(num_hiddens, num_hiddens, dtype=torch.float64)
    idx = torch.arange(0, num_hiddens, 2)
    M[idx, idx], M[idx, idx + 1] = c, s
    M[idx + 1, idx], M[idx + 1, idx + 1] = -s, c
    return M


def positional_encoding(num_hiddens: int = 32, num_steps: int = 60) -> ChapterResult:
    """Plot the encoding, print the binary analogy, and check the rotation property numerically.

    The table comes from `attnlab.attention.PositionalEncoding` (the model's own module, fed zeros
    in eval mode so the output *is* the encoding), so this checks the code the Transformer runs.
    """
    from attnlab.attention import PositionalEncoding

    if num_hiddens < 2 or num_hiddens % 2:
        raise ValueError(f"num_hiddens must be an even number >= 2 (sin/cos pairs), got {num_hiddens}")
    if num_steps < 2:
        raise ValueError(f"num_steps must be >= 2 to compare shifted positions, got {num_steps}")
    pe = PositionalEncoding(num_hiddens, dropout=0.0, max_len=num_steps).eval()
    with torch.no_grad():
        P = pe(torch.zeros(1, num_steps, num_hiddens))[0]  # (L, D)
    P64 = P.double()
    formula_err = float((P64 - sinusoid_reference(num_steps, num_hiddens)).abs().max())
    # Every shift k and every position pos with pos + k < L: compare PE(pos+k) with M_k PE(pos).
    rot_err = max(
        float((P64[k:] - P64[:-k] @ rotation_matrix(k, num_hiddens).T).abs().max()) for k in range(1, num_steps)
    )

    columns = list(range(6, 10)) if num_hiddens >= 10 else list(range(min(4, num_hiddens)))
    # Binary analogy: bit b flips every 2^b numbers, like sin columns of falling frequency.
    bits = min(3, (num_hiddens + 1) // 2)
    cols = [2 * b for b in range(bits)]
    n = min(8, num_steps)
    table_rows = [[p, f"{p:03b}"] + [round(float(P[p, c]), 2) for c in cols] for p in range(n)]
    pre = "\n".join(f"{p} in binary is {p:03b}" for p in range(8))
    paragraph = (
        f"The sinusoidal encoding (num_hiddens={num_hiddens}, {num_steps} positions) matches the "
        f"paper's formula to {formula_err:.1e}. Like the bits of a binary counter, whose higher "
        f"bits flip less often, higher encoding columns oscillate at lower frequencies. Shifting "
        f"by k positions is a fixed block-diagonal rotation M_k, the same for every position: over "
        f"all shifts 1..{num_steps - 1} and all positions, max |PE(pos+k) - M_k PE(pos)| = "
        f"{rot_err:.1e}, which is why attention can learn to use relative positions."
    )
    return ChapterResult(
        "Positional encoding",
        paragraph,
        tables=[
            (["pos", "binary"] + [f"col {c}" for c in cols], table_rows),
            (["check", "max abs error"], [["PE == formula", formula_err], ["PE(pos+k) == M_k PE(pos)", rot_err]]),
        ],
        figures={"pe_columns": viz.plot_positional_encoding(P, columns), "pe_heatmap": viz.plot_positional_heatmap(P)},
        pre=pre,
        data={"P": P, "formula_max_error": formula_err, "rotation_max_error": rot_err},
    )


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
    fig = viz.plot_scaling(
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


# The parameter tables live in attnlab.chapter_params (imported last: it needs ChapterResult from here).
from attnlab.chapter_params import (  # noqa: E402, F401
    TRANSFORMER_SETTINGS,
    AttentionParams,
    FFNParams,
    TransformerParams,
    attention_param_table,
    complexity_table,
    count_parameters,
    ffn_param_table,
    params,
    transformer_param_table,
)
