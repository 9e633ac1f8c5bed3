"""Figures of a head analysis (`analyze_heads` output): importance heatmaps and pruning curves.
Built on `matplotlib.figure.Figure` without pyplot, like `attnlab.viz`."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .heads import importance_grid


def plot_importance(report: dict, key: str = "gradient_importance") -> Figure:
    """One heatmap per attention kind: layers (rows) x heads (columns), both counted from 1; colour = importance."""
    kinds = report["kinds"]
    fig = Figure(figsize=(3.2 * len(kinds), 2.6), layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False)[0]
    for ax, (kind, names) in zip(axes, kinds.items()):
        grid = np.array(importance_grid(report[key], names), dtype=float)
        im = ax.imshow(grid, cmap="Reds", aspect="auto")
        ax.set_title(kind)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        # Counted from 1, as the tables beside it, the attention maps and the explorer count them.
        ax.set_xticks(range(grid.shape[1]), [str(h + 1) for h in range(grid.shape[1])])
        ax.set_yticks(range(grid.shape[0]), [str(i + 1) for i in range(grid.shape[0])])
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle("head importance (|d loss / d head gate|, Michel et al.)")
    return fig


def plot_pruning_curves(report: dict) -> Figure:
    """Validation BLEU (or loss, without BLEU) against the number of heads removed, one line per kind."""
    curves = report["pruning_curves"]
    metric = "bleu" if all(p["bleu"] is not None for c in curves.values() for p in c) else "loss"
    fig = Figure(figsize=(4.5, 3.2), layout="constrained")
    ax = fig.subplots()
    for kind, curve in curves.items():
        ax.plot([p["removed"] for p in curve], [p[metric] for p in curve], marker="o", label=kind)
    ax.set_xlabel("heads removed (least important first)")
    ax.set_ylabel(f"validation {metric.upper() if metric == 'bleu' else metric}")
    ax.legend()
    return fig
