"""Analyses of trained models: which attention heads do what, and which matter (`heads`)."""

from .heads import (
    analyze_heads,
    attention_kinds,
    evaluate_with_masks,
    gradient_importance,
    head_statistics,
    masked_head_scores,
    pruning_curve,
    save_pruned_run,
)
from .positions import position_figure, position_maps

__all__ = [
    "analyze_heads",
    "attention_kinds",
    "evaluate_with_masks",
    "gradient_importance",
    "head_statistics",
    "masked_head_scores",
    "position_figure",
    "position_maps",
    "pruning_curve",
    "save_pruned_run",
]
