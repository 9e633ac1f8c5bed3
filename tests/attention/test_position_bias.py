"""ALiBi slopes and T5 buckets against their papers' code and `transformers`."""

import math

import pytest
import torch
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.t5.modeling_t5 import T5Attention

from attnlab.attention import AlibiBias, T5RelativeBias, alibi_slopes, t5_relative_bucket


def _paper_slopes(n):
    """Press et al.'s reference code (github.com/ofirpress/attention_with_linear_biases)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + _paper_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


@pytest.mark.parametrize("heads", range(1, 17))
def test_alibi_slopes_equal_the_paper_and_bloom(heads):
    want = torch.tensor(_paper_slopes(heads), dtype=torch.float32)
    torch.testing.assert_close(alibi_slopes(heads), want)
    # BLOOM's alibi is slope_h * key position: at position 1 it is the slope itself.
    bloom = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)  # (H, 1, 2)
    torch.testing.assert_close(alibi_slopes(heads), bloom[:, 0, 1])


def test_alibi_bias_penalises_distance():
    bias = AlibiBias(4)(torch.arange(5), torch.arange(5))  # (1, 4, 5, 5)
    assert bias.shape == (1, 4, 5, 5)
    torch.testing.assert_close(bias[0, 0, 4], -0.25 * torch.tensor([4.0, 3, 2, 1, 0]))
    assert bool((bias.diagonal(dim1=-2, dim2=-1) == 0).all())
    with pytest.raises(ValueError, match="positive"):
        alibi_slopes(0)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("buckets", "distance"), [(32, 128), (16, 64), (8, 20)])
def test_t5_buckets_equal_transformers(bidirectional, buckets, distance):
    rel = torch.arange(-512, 513)
    want = T5Attention._relative_position_bucket(rel, bidirectional, buckets, distance)
    got = t5_relative_bucket(rel, bidirectional, buckets, distance)
    assert torch.equal(got, want)


def test_t5_bias_is_relative_and_shared_across_offsets():
    torch.manual_seed(0)
    t5 = T5RelativeBias(2, bidirectional=False)
    torch.nn.init.normal_(t5.embedding.weight)
    full = t5(torch.arange(6), torch.arange(6))
    step = t5(torch.tensor([5]), torch.arange(6))  # the last query, as one decoding step sees it
    torch.testing.assert_close(step, full[:, :, 5:])
