"""The chapter's pictures: attention heatmaps, kernel regression, positional encoding, scaling.

Every function builds and returns a `matplotlib.figure.Figure` without touching `pyplot`, so the
library never picks a GUI backend, never keeps global figure state, and is safe inside a web server
or a test. Save with `save_figure` (atomic) or `fig.savefig`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from attnlab.viz.heatmaps import show_heatmaps, to_numpy


def plot_kernel_regression(
    x_test,
    y_truth,
    predictions: Mapping[str, object],
    x_train=None,
    y_train=None,
    *,
    title: str | None = None,
    figsize: tuple[float, float] = (5.0, 3.0),
) -> Figure:
    """Truth, one line per prediction, and the noisy training points (the book's `plot_kernel_reg`).

    Shapes: x_test, y_truth (Q,); each prediction (Q,); x_train, y_train (K,).
    """
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.subplots()
    ax.plot(to_numpy(x_test), to_numpy(y_truth), "k-", lw=2, label="truth")
    for name, pred in predictions.items():
        ax.plot(to_numpy(x_test), to_numpy(pred), "--", label=name)
    if x_train is not None and y_train is not None:
        ax.plot(to_numpy(x_train), to_numpy(y_train), "o", alpha=0.5, ms=4, label="train")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    if title:
        ax.set_title(title)
    # Outside the axes: inside, the legend hides the curves wherever it lands.
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def plot_loss_curve(
    losses: Sequence[float],
    *,
    xlabel: str = "epoch",
    ylabel: str = "loss",
    title: str | None = None,
    figsize: tuple[float, float] = (4.0, 2.5),
) -> Figure:
    """One loss value per epoch (1-based x axis)."""
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.subplots()
    ys = to_numpy(list(losses))
    ax.plot(np.arange(1, len(ys) + 1), ys, "o-" if len(ys) <= 50 else "-", lw=1)  # markers only when few
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    return fig


def plot_positional_encoding(
    P, columns: Sequence[int] = (6, 7, 8, 9), *, figsize: tuple[float, float] = (6.0, 2.5)
) -> Figure:
    """Selected encoding columns as curves over positions. P: (L, D) encoding table."""
    P = to_numpy(P)
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.subplots()
    for c in columns:
        ax.plot(np.arange(P.shape[0]), P[:, c], label=f"col {c}")
    ax.set_xlabel("row (position)")
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def plot_positional_heatmap(P, *, figsize: tuple[float, float] = (3.5, 4.0)) -> Figure:
    """The whole (L, D) encoding as one heatmap: rows are positions, columns dimensions."""
    P = to_numpy(P)
    return show_heatmaps(
        P[None, None], xlabel="column (encoding dimension)", ylabel="row (position)", figsize=figsize, cmap="Blues"
    )


def plot_scaling(
    dims: Sequence[int],
    series: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    figsize: tuple[float, float] = (10.0, 3.0),
) -> Figure:
    """One panel per statistic, unscaled vs scaled curves over d_k (log x axis).

    series: {panel title: {curve label: values (one per d_k)}}.
    """
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(1, len(series), squeeze=False)[0]
    for ax, (panel, curves) in zip(axes, series.items()):
        for label, values in curves.items():
            ax.plot(list(dims), to_numpy(list(values)), "o-", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("$d_k$")
        ax.set_title(panel, fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return fig
