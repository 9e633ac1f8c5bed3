"""Figures: attention heatmaps and the chapter's plots, as matplotlib Figures (no pyplot), saved atomically."""

from .files import FIGURE_FORMATS, save_figure
from .flash_tiles import plot_flash_tiles
from .heatmaps import attention_figures, show_heatmaps, to_numpy
from .online_softmax import plot_online_softmax
from .plots import (
    plot_kernel_regression,
    plot_loss_curve,
    plot_positional_encoding,
    plot_positional_heatmap,
    plot_scaling,
)
from .positions import plot_position_maps

__all__ = [
    "to_numpy",
    "show_heatmaps",
    "attention_figures",
    "plot_kernel_regression",
    "plot_loss_curve",
    "plot_online_softmax",
    "plot_flash_tiles",
    "plot_positional_encoding",
    "plot_positional_heatmap",
    "plot_position_maps",
    "plot_scaling",
    "FIGURE_FORMATS",
    "save_figure",
]
