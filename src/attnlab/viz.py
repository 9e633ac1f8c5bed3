"""The chapter's pictures: attention heatmaps, kernel regression, positional encoding, scaling.

Every function builds and returns a `matplotlib.figure.Figure` without touching `pyplot`, so the
library never picks a GUI backend, never keeps global figure state, and is safe inside a web server
or a test. Save with `save_figure` (atomic) or `fig.savefig`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from attnlab._io import atomic_path

__all__ = [
    "show_heatmaps",
    "plot_kernel_regression",
    "plot_loss_curve",
    "plot_positional_encoding",
    "plot_positional_heatmap",
    "plot_scaling",
    "save_figure",
]

# Formats `save_figure` knows; a path ending in one of these saves just that format.
FIGURE_FORMATS = ("png", "svg", "pdf")


def _to_numpy(x) -> np.ndarray:
    """Tensor (any device, with grad) or array-like -> float64 numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


def show_heatmaps(
    matrices,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None = None,
    figsize: tuple[float, float] = (2.5, 2.5),
    cmap: str = "Reds",
    *,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    mask=None,
) -> Figure:
    """Draw a grid of attention matrices with one shared colorbar (the book's `show_heatmaps`).

    Args:
        matrices: (rows, cols, Lq, Lk) tensor or array — e.g. one row per layer, one column per head.
        xlabel, ylabel: axis labels (keys, queries); drawn on the bottom row / first column only.
        titles: one title per column (e.g. "head 1"), as in the book.
        figsize: size of *one* cell in inches; the figure is cols*w by rows*h.
        cmap: matplotlib colormap name.
        xticklabels: Lk key tokens; yticklabels: Lq query tokens (labels every cell's axes).
        row_labels: one label per row (e.g. "layer 1"), prefixed to the first column's ylabel.
        mask: boolean, True = visible, broadcastable to `matrices`. Hidden cells are drawn blank
            (NaN -> the colormap's "bad" color) instead of as 0-valued cells, so a masked key is
            visibly different from a key that got zero weight.

    Returns:
        Figure with rows*cols image axes (plus one colorbar axis).
    """
    data = _to_numpy(matrices)
    if data.ndim != 4:
        raise ValueError(
            f"show_heatmaps expects matrices of shape (rows, cols, Lq, Lk), got shape {data.shape}; "
            "add leading axes, e.g. weights.reshape(1, 1, Lq, Lk) for a single matrix"
        )
    rows, cols, lq, lk = data.shape
    if mask is not None:
        m = _to_numpy(mask).astype(bool)
        try:
            m = np.broadcast_to(m, data.shape)
        except ValueError:
            raise ValueError(f"mask of shape {m.shape} does not broadcast to matrices of shape {data.shape}") from None
        data = np.where(m, data, np.nan)
    for name, labels, n in (("xticklabels", xticklabels, lk), ("yticklabels", yticklabels, lq)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} labels but the matrices have {n} positions")
    if titles is not None and len(titles) != cols:
        raise ValueError(f"titles has {len(titles)} entries but there are {cols} columns")
    if row_labels is not None and len(row_labels) != rows:
        raise ValueError(f"row_labels has {len(row_labels)} entries but there are {rows} rows")

    finite = data[np.isfinite(data)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if vmin == vmax:  # a constant matrix would give a degenerate color scale
        vmax = vmin + 1.0
    # Masked = light grey, distinct from every value color (with_extremes returns a copy).
    colormap = colormaps[cmap].with_extremes(bad="#dddddd")

    fig = Figure(figsize=(figsize[0] * cols, figsize[1] * rows), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    image = None
    for i in range(rows):
        for j in range(cols):
            ax = axes[i, j]
            image = ax.imshow(data[i, j], cmap=colormap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                label = f"{row_labels[i]}\n{ylabel}" if row_labels is not None else ylabel
                ax.set_ylabel(label)
            if titles is not None and i == 0:
                ax.set_title(titles[j])
            if xticklabels is not None:
                ax.set_xticks(range(lk), labels=list(xticklabels), rotation=90)
            if yticklabels is not None:
                ax.set_yticks(range(lq), labels=list(yticklabels))
    assert image is not None  # subplots() refuses an empty grid, so the loop drew at least one cell
    fig.colorbar(image, ax=axes, shrink=0.6)
    return fig


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
    ax.plot(_to_numpy(x_test), _to_numpy(y_truth), "k-", lw=2, label="truth")
    for name, pred in predictions.items():
        ax.plot(_to_numpy(x_test), _to_numpy(pred), "--", label=name)
    if x_train is not None and y_train is not None:
        ax.plot(_to_numpy(x_train), _to_numpy(y_train), "o", alpha=0.5, ms=4, label="train")
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
    ys = _to_numpy(list(losses))
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
    P = _to_numpy(P)
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.subplots()
    for c in columns:
        ax.plot(np.arange(P.shape[0]), P[:, c], label=f"col {c}")
    ax.set_xlabel("row (position)")
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def plot_positional_heatmap(P, *, figsize: tuple[float, float] = (3.5, 4.0)) -> Figure:
    """The whole (L, D) encoding as one heatmap: rows are positions, columns dimensions."""
    P = _to_numpy(P)
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
            ax.plot(list(dims), _to_numpy(list(values)), "o-", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("$d_k$")
        ax.set_title(panel, fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return fig


def save_figure(
    fig: Figure, path: str | os.PathLike, formats: Sequence[str] = ("png", "svg"), *, dpi: int = 120
) -> list[Path]:
    """Write `fig` atomically (temp file + rename) and return the written paths.

    `path` with a known extension (.png/.svg/.pdf) writes just that file; without one, writes
    `path.<fmt>` for every format in `formats`. An interrupted save never leaves a truncated image.
    """
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    if ext in FIGURE_FORMATS:
        targets = [(path, ext)]
    else:
        bad = [f for f in formats if f not in FIGURE_FORMATS]
        if bad:
            raise ValueError(f"unknown figure format(s) {bad}; expected some of {FIGURE_FORMATS}")
        targets = [(path.with_name(f"{path.name}.{f}"), f) for f in formats]
    written = []
    for target, fmt in targets:
        # Atomic, also on Ctrl-C: a previous image stays intact until the new one is complete.
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi)
        written.append(target)
    return written


# What each kind of attention map is called in files and on its axes: (file name, x label, y label).
_KIND_PANELS = {
    "encoder_self": ("encoder_self_attention", "source keys", "source queries"),
    "decoder_self": ("decoder_self_attention", "decoder keys", "output queries"),
    "cross": ("encoder_decoder_attention", "source keys", "output queries"),
}


def attention_figures(exp) -> list[tuple[str, Figure]]:
    """The heatmaps of an `attnlab.explain.Explanation`: [(name, Figure)], one per kind of map the
    model declares, each a layer x head grid with tokens on the axes (rows of decoder maps are
    labelled with the token each step produced). A model whose only attention is its decoder's over
    the source (Bahdanau) gets the book's figure, named decoder_attention, one plain heatmap per head."""
    axes = {
        "encoder_self": (exp.src_tokens, exp.src_tokens),
        "decoder_self": (exp.tgt_input_tokens, exp.tgt_tokens),
        "cross": (exp.src_tokens, exp.tgt_tokens),
    }
    figures = []
    for kind, w in exp.maps.items():
        name, xl, yl = _KIND_PANELS[kind]
        xt, yt = axes[kind]
        L, H = w.shape[:2]
        if set(exp.maps) == {"cross"} and L * H == 1:  # the book's Bahdanau figure: one map, no grid
            figures.append(
                ("decoder_attention", show_heatmaps(w, xl, yl, figsize=(4, 4), xticklabels=xt, yticklabels=yt))
            )
            continue
        figures.append(
            (
                name,
                show_heatmaps(
                    w,
                    xl,
                    yl,
                    titles=[f"head {h + 1}" for h in range(H)],
                    figsize=(2.8, 2.8),
                    xticklabels=xt,
                    yticklabels=yt,
                    row_labels=[f"layer {i + 1}" for i in range(L)],
                ),
            )
        )
    return figures
