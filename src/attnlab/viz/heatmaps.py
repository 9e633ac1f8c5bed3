"""Attention heatmaps: `show_heatmaps` (the book's function: a grid of (Lq, Lk) weight matrices with a
shared colour bar) and `attention_figures` (every map of an `Explanation`, one figure per kind).

Figures are built without `pyplot`, so the library never picks a GUI backend and is safe in a server.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from .fonts import label_fonts


def to_numpy(x) -> np.ndarray:
    """Tensor (any device, with grad) or array-like -> float64 numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


def _checked(matrices, mask, xticklabels, yticklabels, titles, row_labels) -> np.ndarray:
    """`show_heatmaps`' arguments checked against the matrices: (rows, cols, Lq, Lk) float64, hidden cells NaN."""
    data = to_numpy(matrices)
    if data.ndim != 4:
        raise ValueError(
            f"show_heatmaps expects matrices of shape (rows, cols, Lq, Lk), got shape {data.shape}; "
            "add leading axes, e.g. weights.reshape(1, 1, Lq, Lk) for a single matrix"
        )
    rows, cols, lq, lk = data.shape
    if mask is not None:
        m = to_numpy(mask).astype(bool)
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
    return data


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
    data = _checked(matrices, mask, xticklabels, yticklabels, titles, row_labels)
    rows, cols, lq, lk = data.shape

    finite = data[np.isfinite(data)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if vmin == vmax:  # a constant matrix would give a degenerate color scale
        vmax = vmin + 1.0
    # Masked = light grey, distinct from every value color (with_extremes returns a copy).
    colormap = colormaps[cmap].with_extremes(bad="#dddddd")

    # tokens in any script: a family list holding their glyphs, right-to-left labels shaped (viz.fonts)
    xticks = label_fonts(xticklabels) if xticklabels is not None else None
    yticks = label_fonts(yticklabels) if yticklabels is not None else None
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
            if xticks is not None:
                ax.set_xticks(range(lk), labels=xticks[0], rotation=90, fontfamily=xticks[1])
            if yticks is not None:
                ax.set_yticks(range(lq), labels=yticks[0], fontfamily=yticks[1])
    assert image is not None  # subplots() refuses an empty grid, so the loop drew at least one cell
    fig.colorbar(image, ax=axes, shrink=0.6)
    return fig


# What each kind of attention map is called in files and on its axes: (file name, x label, y label).
_KIND_PANELS = {
    "encoder_self": ("encoder_self_attention", "source keys", "source queries"),
    "decoder_self": ("decoder_self_attention", "decoder keys", "output queries"),
    "cross": ("encoder_decoder_attention", "source keys", "output queries"),
}


def attention_figures(exp) -> list[tuple[str, Figure]]:
    """The heatmaps of an `attnlab.analysis.Explanation`: [(name, Figure)], one per kind of map the
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
