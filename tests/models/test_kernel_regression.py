"""Nadaraya–Watson: weights are distributions, limits behave, training helps, errors are clear."""

import math

import pytest
import torch

from attnlab.models import NadarayaWatson, NWKernelRegression
from attnlab.models.kernel_regression import KERNELS, average_pooling, fit, leave_one_out, make_data, target_function


@pytest.fixture(scope="module")
def data():
    return make_data(seed=0)


def test_make_data_is_the_books_setting(data):
    x_train, y_train, x_test, y_truth = data
    assert x_train.shape == (50,) and x_test.shape == (50,)
    assert torch.all(x_train[1:] >= x_train[:-1]) and x_train.min() >= 0 and x_train.max() < 5
    torch.testing.assert_close(x_test, torch.arange(50) / 10)
    torch.testing.assert_close(y_truth, 2 * torch.sin(x_test) + x_test**0.8)
    noise = y_train - target_function(x_train)
    assert 0.3 < float(noise.std()) < 0.7  # sd 0.5 with 50 draws
    assert torch.equal(make_data(seed=0).y_train, y_train)
    assert not torch.equal(make_data(seed=1).y_train, y_train)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_weights_sum_to_one(data, kernel):
    model = NadarayaWatson(bandwidth=1.0, kernel=kernel)
    w = model.weights(data.x_test, data.x_train)
    assert w.shape == (50, 50)
    assert torch.all(w >= 0)
    torch.testing.assert_close(w.sum(1), torch.ones(50))
    pred, w2 = model(data.x_test, data.x_train, data.y_train, return_weights=True)
    torch.testing.assert_close(w, w2)
    torch.testing.assert_close(pred, w @ data.y_train)


def test_gaussian_matches_the_books_formula(data):
    q, k = data.x_test, data.x_train
    h = 0.7
    expected = torch.exp(-(((q[:, None] - k[None]) / h) ** 2) / 2)
    expected = expected / expected.sum(1, keepdim=True)
    torch.testing.assert_close(NadarayaWatson(h).weights(q, k), expected)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "triangular", "boxcar"])
def test_wide_bandwidth_tends_to_the_mean(data, kernel):
    mean = data.y_train.mean()
    errs = [
        float((NadarayaWatson(h, kernel)(data.x_test, data.x_train, data.y_train) - mean).abs().max())
        for h in (1.0, 10.0, 1000.0)
    ]
    assert errs[0] > errs[1] > errs[2] or errs[2] < 1e-6
    assert errs[2] < 1e-3
    torch.testing.assert_close(average_pooling(data.x_test, data.x_train, data.y_train), mean.expand(50))


def test_empty_support_gives_zero_row_not_nan():
    q = torch.tensor([0.0, 100.0])
    k = torch.tensor([0.0, 0.5, 1.0])
    v = torch.tensor([1.0, 2.0, 3.0])
    for kernel in ("boxcar", "epanechnikov", "triangular"):
        pred, w = NadarayaWatson(0.1, kernel)(q, k, v, return_weights=True)
        assert not torch.isnan(pred).any() and not torch.isnan(w).any()
        assert torch.all(w[1] == 0) and pred[1] == 0
        assert w[0].sum() == pytest.approx(1.0)
    # The Gaussian never underflows into an empty row: far queries attend to the nearest key.
    pred, w = NadarayaWatson(0.1)(q, k, v, return_weights=True)
    assert w[1].argmax() == 2 and pred[1] == pytest.approx(3.0)


def test_per_query_keys_and_shape_errors(data):
    keys, values = leave_one_out(data.x_train, data.y_train)
    assert keys.shape == (50, 49)
    assert not torch.any(keys == data.x_train[:, None])  # row i never contains x_i
    pred = NadarayaWatson()(data.x_train, keys, values)
    assert pred.shape == (50,)
    with pytest.raises(ValueError, match="keys must have shape"):
        NadarayaWatson()(data.x_train, keys[:10], values[:10])
    with pytest.raises(ValueError, match="values must match"):
        NadarayaWatson()(data.x_test, data.x_train, data.y_train[:10])
    with pytest.raises(ValueError, match=r"queries must have shape \(Q,\)"):
        NadarayaWatson()(data.x_test[:, None], data.x_train, data.y_train)


def test_invalid_kernel_or_bandwidth_names_valid_values():
    with pytest.raises(ValueError, match="gaussian, boxcar, epanechnikov"):
        NadarayaWatson(kernel="cosine")
    for h in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="bandwidth must be > 0"):
            NadarayaWatson(bandwidth=h)


def test_parametric_matches_nonparametric_at_w_equals_one_over_h(data):
    nw = NWKernelRegression(w=2.0)
    torch.testing.assert_close(
        nw.weights(data.x_test, data.x_train), NadarayaWatson(0.5).weights(data.x_test, data.x_train)
    )


def test_training_lowers_leave_one_out_loss(data):
    torch.manual_seed(0)
    model = NWKernelRegression()  # book: w ~ U(0, 1)
    keys, values = leave_one_out(data.x_train, data.y_train)

    def loo():
        with torch.no_grad():
            return float(((model(data.x_train, keys, values) - data.y_train) ** 2).mean())

    before = loo()
    losses = fit(model, data.x_train, data.y_train, lr=0.5, epochs=5)
    assert len(losses) == 5 and losses[0] == pytest.approx(before)
    assert loo() < before
    assert losses[-1] < losses[0]
    with torch.no_grad():
        pred = model(data.x_test, data.x_train, data.y_train)
    mse = float(((pred - data.y_truth) ** 2).mean())
    assert math.isfinite(mse)
    # Better than ignoring the query altogether.
    avg = float(((average_pooling(data.x_test, data.x_train, data.y_train) - data.y_truth) ** 2).mean())
    assert mse < avg


def test_fit_rejects_bad_settings(data):
    with pytest.raises(ValueError, match="epochs"):
        fit(NWKernelRegression(1.0), data.x_train, data.y_train, epochs=-1)
    with pytest.raises(ValueError, match="lr"):
        fit(NWKernelRegression(1.0), data.x_train, data.y_train, lr=0)
    with pytest.raises(ValueError, match="n_train"):
        make_data(n_train=0)
