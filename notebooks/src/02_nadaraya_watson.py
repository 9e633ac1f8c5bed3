# %% [markdown]
# # Attention pooling: Nadaraya–Watson kernel regression
#
# Given training pairs (keys x_i, values y_i), predict f(q) as a weighted average of the values, with
# weights from a kernel of q - x_i. The Gaussian kernel's weights are a softmax: attention pooling.

# %%
import os

import torch

from attnlab.models import NadarayaWatson, NWKernelRegression
from attnlab.models.kernel_regression import fit, make_data
from attnlab.viz.heatmaps import show_heatmaps
from attnlab.viz.plots import plot_kernel_regression

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)

# %%
data = make_data(seed=0, n_train=50)
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
# The attention weights: rows are test inputs (queries), columns training inputs (keys), both sorted,
# so a good kernel puts its weight near the diagonal.

# %%
_, w = NadarayaWatson(bandwidth=1.0, kernel="gaussian")(data.x_test, data.x_train, data.y_train, return_weights=True)
show_heatmaps(w.reshape(1, 1, *w.shape), xlabel="training inputs", ylabel="test inputs")

# %% [markdown]
# ## A learned width
# `NWKernelRegression` learns the Gaussian's width w by SGD (leave-one-out, as the book trains it).

# %%
model = NWKernelRegression(w=0.5)
losses = fit(model, data.x_train, data.y_train, lr=0.5, epochs=2 if SMALL else 5)
print("leave-one-out MSE per epoch:", [round(x, 4) for x in losses])
with torch.no_grad():
    learned = model(data.x_test, data.x_train, data.y_train)
plot_kernel_regression(data.x_test, data.y_truth, {"learned width": learned}, data.x_train, data.y_train)
