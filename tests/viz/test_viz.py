"""viz: Figures without pyplot, the heatmap grid and masking, atomic saving."""

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnlab.viz.files import save_figure
from attnlab.viz.heatmaps import show_heatmaps
from attnlab.viz.online_softmax import plot_online_softmax
from attnlab.viz.plots import (
    plot_kernel_regression,
    plot_loss_curve,
    plot_positional_encoding,
    plot_positional_heatmap,
    plot_scaling,
)


def _images(fig):
    return [ax.images[0] for ax in fig.axes if ax.images]


def test_show_heatmaps_grid_and_shared_colorbar():
    m = torch.rand(2, 3, 4, 5)
    fig = show_heatmaps(m, "keys", "queries", titles=["h1", "h2", "h3"], row_labels=["layer 1", "layer 2"])
    assert isinstance(fig, Figure)
    images = _images(fig)
    assert len(images) == 6  # rows * cols image axes
    assert len(fig.axes) == 7  # + exactly one colorbar
    assert {im.get_clim() for im in images} == {(float(m.min()), float(m.max()))}
    np.testing.assert_allclose(images[4].get_array(), m[1, 1].numpy(), rtol=1e-6)
    assert [fig.axes[j].get_title() for j in range(3)] == ["h1", "h2", "h3"]
    assert fig.axes[3].get_ylabel() == "layer 2\nqueries"


def test_masked_cells_are_nan_not_zero():
    w = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    visible = torch.tensor([[True, True, False], [True, False, True]])
    fig = show_heatmaps(w[None, None], "k", "q", mask=visible)
    data = np.ma.getdata(_images(fig)[0].get_array())
    assert np.isnan(data[0, 2]) and np.isnan(data[1, 1])
    assert data[1, 2] == 0.0  # visible key with zero weight stays a real 0
    assert np.isfinite(data[visible.numpy()]).all()


def test_token_labels_and_numpy_input():
    fig = show_heatmaps(
        np.eye(3)[None, None], "keys", "queries", xticklabels=["a", "b", "c"], yticklabels=["x", "y", "z"]
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]


def test_show_heatmaps_errors():
    with pytest.raises(ValueError, match=r"\(rows, cols, Lq, Lk\)"):
        show_heatmaps(torch.rand(3, 4), "k", "q")
    with pytest.raises(ValueError, match="does not broadcast"):
        show_heatmaps(torch.rand(1, 1, 3, 4), "k", "q", mask=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="xticklabels has 2 labels"):
        show_heatmaps(torch.rand(1, 1, 3, 4), "k", "q", xticklabels=["a", "b"])


def test_other_plots_return_figures():
    x = torch.linspace(0, 1, 5)
    assert isinstance(plot_kernel_regression(x, x, {"p": x}, x, x), Figure)
    assert isinstance(plot_loss_curve([3.0, 2.0, 1.0]), Figure)
    P = torch.rand(10, 12)
    assert len(plot_positional_encoding(P).axes[0].lines) == 4
    assert isinstance(plot_positional_heatmap(P), Figure)
    fig = plot_scaling([8, 16], {"a": {"u": [1, 2], "s": [1, 1]}, "b": {"u": [3, 4]}})
    assert len(fig.axes) == 2


def test_save_figure_atomic_formats(tmp_path, monkeypatch):
    fig = plot_loss_curve([1.0, 0.5])
    paths = save_figure(fig, tmp_path / "sub" / "loss")
    assert [p.name for p in paths] == ["loss.png", "loss.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in paths[1].read_bytes()[:2000]
    assert [p.name for p in save_figure(fig, tmp_path / "one.svg")] == ["one.svg"]
    with pytest.raises(ValueError, match="unknown figure format"):
        save_figure(fig, tmp_path / "x", formats=("bmp",))

    # An interrupted save keeps the previous file and leaves no temp file behind.
    before = paths[0].read_bytes()

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fig, "savefig", boom)
    with pytest.raises(KeyboardInterrupt):
        save_figure(fig, tmp_path / "sub" / "loss.png")
    assert paths[0].read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["loss.png", "loss.svg"]


def test_online_softmax_figure_ends_at_exact_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 10, 4), torch.randn(1, 2, 10, 4)
    fig = plot_online_softmax(q, k, v, block_size=4, causal=True)
    m_ax, l_ax, err_ax = fig.axes
    assert len(m_ax.lines) == 3 and list(m_ax.lines[0].get_xdata()) == [4, 8, 10]
    assert all(np.all(np.diff(line.get_ydata()) >= 0) for line in m_ax.lines)  # the running max never falls
    assert max(line.get_ydata()[-1] for line in err_ax.lines) < 1e-5
