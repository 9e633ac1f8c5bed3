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

from collections.abc import Sequence
from typing import Any

import torch

from attnlab.chapter.result import ChapterResult
from attnlab.models.kernel_regression import NadarayaWatson, NWKernelRegression, average_pooling, fit, make_data
from attnlab.viz.heatmaps import show_heatmaps
from attnlab.viz.plots import plot_kernel_regression, plot_loss_curve


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
        "predictions": plot_kernel_regression(
            x_test, y_truth, preds, x_train, y_train, title=f"nonparametric, bandwidth {bandwidth:g}"
        ),
        "predictions_learned": plot_kernel_regression(
            x_test, y_truth, {f"learned (w={w:.3g})": learned}, x_train, y_train, title="parametric (learned width)"
        ),
        "attention_nonparametric": show_heatmaps(
            torch.stack(weights)[None],
            xlabel="sorted training inputs",
            ylabel="sorted test inputs",
            titles=list(kernels),
        ),
        "attention_parametric": show_heatmaps(
            learned_w[None, None],
            xlabel="sorted training inputs",
            ylabel="sorted test inputs",
            titles=[f"learned w={w:.3g}"],
        ),
    }
    if losses:
        figs["loss"] = plot_loss_curve(losses, ylabel="leave-one-out MSE", title="training the kernel width")
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
