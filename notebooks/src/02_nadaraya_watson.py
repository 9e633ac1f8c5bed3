# %% [markdown]
# # 11.2 Attention pooling by similarity
#
# Nadaraya–Watson kernel regression (1964) is attention before the word: to predict *f(q)* at a query
# *q*, average the training targets *y_i* (the values) with weights from a kernel of the distance between
# *q* and each training input *x_i* (the keys). Training points close to the query count most. With the
# Gaussian kernel the weights are exactly a softmax of `-(q - x_i)^2 / 2h^2` — attention scores.
#
# The data: 50 noisy samples of `f(x) = 2 sin(x) + x^0.8` on [0, 5), and a grid of test queries.

# %%
# %matplotlib inline
import os

import torch

from attnlab.models import NadarayaWatson, NWKernelRegression
from attnlab.models.kernel_regression import fit, make_data
from attnlab.viz.heatmaps import show_heatmaps
from attnlab.viz.plots import plot_kernel_regression

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)
data = make_data(seed=0, n_train=50)

# %% [markdown]
# ## Fixed kernels
#
# Four kernels at bandwidth 1: `constant` gives every key the same weight (average pooling, the
# baseline), the Gaussian decays smoothly, boxcar and Epanechnikov are cut off beyond the bandwidth.
# Look at how far each prediction curve is from the truth, and at which curve ignores the data's shape.

# %%
predictions = {}
for kernel in ("constant", "gaussian", "boxcar", "epanechnikov"):
    model = NadarayaWatson(bandwidth=1.0, kernel=kernel)
    predictions[kernel] = model(data.x_test, data.x_train, data.y_train)
plot_kernel_regression(
    data.x_test,
    data.y_truth,
    predictions,
    data.x_train,
    data.y_train,
    title="fixed kernels (constant = average pooling)",
)

# %% [markdown]
# Average pooling draws one flat line, the mean of the targets: it never looks at the query. Every
# similarity kernel follows the curve, because each query now listens mostly to its neighbours. The mean
# squared errors say the same in numbers:

# %%
for kernel, pred in predictions.items():
    print(f"{kernel:>12}: MSE {float(((pred - data.y_truth) ** 2).mean()):.3f}")

# %% [markdown]
# ## The attention weights
#
# Rows are test inputs (queries), columns training inputs (keys), both sorted. Expect a bright band along
# the diagonal — a query attends to keys near it — whose width is the bandwidth.

# %%
_, w = NadarayaWatson(bandwidth=1.0, kernel="gaussian")(data.x_test, data.x_train, data.y_train, return_weights=True)
show_heatmaps(w.reshape(1, 1, *w.shape), xlabel="training inputs", ylabel="test inputs")

# %% [markdown]
# The band is there and smooth: each prediction is a local average over a window about two bandwidths
# wide. A narrower kernel would give a thinner band and a wigglier, noisier curve.
#
# ## A learned width
#
# `NWKernelRegression` makes the Gaussian's inverse width *w* a parameter and fits it by SGD, leaving each
# training point out of its own average (else *w* → ∞ would simply memorise the data). Watch the loss
# fall, then compare the curve with the fixed Gaussian above.

# %%
model = NWKernelRegression(w=0.5)
losses = fit(model, data.x_train, data.y_train, lr=0.5, epochs=2 if SMALL else 5)
print("leave-one-out MSE per epoch:", [round(x, 4) for x in losses], " learned w:", round(float(model.w.detach()), 3))
with torch.no_grad():
    learned, learned_w = model(data.x_test, data.x_train, data.y_train, return_weights=True)
plot_kernel_regression(data.x_test, data.y_truth, {"learned width": learned}, data.x_train, data.y_train)

# %% [markdown]
# The learned *w* is larger than the starting 0.5, so the kernel is narrower: the curve hugs the data
# more closely (and follows some of its noise). Its attention band is correspondingly thinner:

# %%
show_heatmaps(learned_w.reshape(1, 1, *learned_w.shape), xlabel="training inputs", ylabel="test inputs")

# %% [markdown]
# Learning the kernel is the step from Nadaraya–Watson to attention: the next sections learn the whole
# scoring function, not only its width.

# %% [markdown]
# ## Exercise 1: a wide kernel is average pooling
#
# Show that as the bandwidth grows the Gaussian predictions approach the mean of the training targets —
# the `constant` kernel's flat line. How wide must the kernel be before every prediction is within 0.01
# of the mean?

# %% tags=["solution"]
mean = data.y_train.mean()
for h in (1.0, 10.0, 100.0, 1000.0):
    gap = float((NadarayaWatson(bandwidth=h)(data.x_test, data.x_train, data.y_train) - mean).abs().max())
    print(f"h = {h:>6g}: largest distance from the mean {gap:.4f}")
assert float((NadarayaWatson(bandwidth=100.0)(data.x_test, data.x_train, data.y_train) - mean).abs().max()) < 0.01

# %% [markdown]
# ## Exercise 2: the Gaussian kernel is a softmax
#
# Compute the Gaussian weights yourself as `softmax(-(q - x)^2 / 2h^2)` over the keys and check that they
# equal the weights `NadarayaWatson` returns, for h = 0.5.

# %% tags=["solution"]
h = 0.5
_, theirs = NadarayaWatson(bandwidth=h)(data.x_test, data.x_train, data.y_train, return_weights=True)
ours = torch.softmax(-((data.x_test[:, None] - data.x_train[None, :]) ** 2) / (2 * h**2), dim=-1)
torch.testing.assert_close(theirs, ours)
print("Gaussian weights == softmax of -(q-x)^2 / 2h^2; rows sum to", float(ours.sum(-1).mean()))

# %% [markdown]
# ## Exercise 3: a kernel with nothing in reach
#
# A boxcar kernel only sees keys within its bandwidth. Ask for a prediction at q = 20, far outside the
# training inputs, with h = 1. What weights and prediction does attnlab give, and why is that better than
# NaN?

# %% tags=["solution"]
pred, weights_far = NadarayaWatson(bandwidth=1.0, kernel="boxcar")(
    torch.tensor([20.0]), data.x_train, data.y_train, return_weights=True
)
assert torch.equal(weights_far, torch.zeros_like(weights_far)) and float(pred) == 0.0
print("no key in reach: a zero weight row and prediction 0 (a NaN would poison every later sum)")
