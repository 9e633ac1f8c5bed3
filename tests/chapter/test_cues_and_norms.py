import pytest
import torch

from attnlab.chapter.cues import attention_cues
from attnlab.chapter.transformer import norm_comparison


def test_attention_cues_is_the_identity_and_draws_one_heatmap():
    res = attention_cues(6)
    assert torch.equal(res.data["weights"][0, 0], torch.eye(6))
    fig = res.figures["attention_cues"]
    assert len([a for a in fig.axes if a.images]) == 1  # one heatmap (plus the colorbar axis)


def test_layer_norm_normalizes_rows_batch_norm_columns():
    res = norm_comparison()
    assert res.data["layer_norm"] == [[-1.0, 1.0], [-1.0, 1.0]]  # the book's printed output
    assert res.data["batch_norm"] == [[-1.0, -1.0], [1.0, 1.0]]
    X = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    res = norm_comparison(X)
    assert torch.tensor(res.data["layer_norm"]).mean(dim=1).abs().max() < 1e-3
    assert torch.tensor(res.data["batch_norm"]).mean(dim=0).abs().max() < 1e-3


@pytest.mark.parametrize("bad", [torch.ones(3), torch.ones(1, 4), torch.ones(4, 1)])
def test_norm_comparison_refuses_shapes_it_cannot_compare(bad):
    with pytest.raises(ValueError, match=r"\(B, D\)"):
        norm_comparison(bad)


def test_attention_cues_refuses_empty():
    with pytest.raises(ValueError, match=r"1..1000"):
        attention_cues(0)
