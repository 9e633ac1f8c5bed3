"""The report's head-importance heatmap counts layers and heads from 1, as its table and the explorer do."""

from __future__ import annotations

from attnlab.analysis.figures import plot_importance


def test_importance_heatmap_counts_layers_and_heads_from_one():
    names = ["decoder.layers.0.cross", "decoder.layers.1.cross"]
    report = {"kinds": {"cross": names}, "gradient_importance": {names[0]: [0.1, 0.2, 0.3], names[1]: [0.3, 0.2, 0.1]}}
    fig = plot_importance(report)
    ax = fig.axes[0]
    assert ax.get_title() == "cross"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2"]
    assert list(ax.get_xticks()) == [0, 1, 2]  # label 1 sits on the first column of the grid
