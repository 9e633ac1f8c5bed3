# %% [markdown]
# # Attention cues
#
# Attention pools *values* with weights computed from *queries* and *keys*. The simplest weights say
# "each query attends only to itself": the identity matrix. This is the chapter's first picture.

# %%
import os

import torch

from attnlab.chapter.cues import attention_cues
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"  # CI runs every notebook in seconds with ATTNLAB_SMALL=1

# %%
weights = torch.eye(10).reshape((1, 1, 10, 10))  # (rows, cols, queries, keys): one heatmap
show_heatmaps(weights, xlabel="Keys", ylabel="Queries")

# %% [markdown]
# `attnlab.chapter.attention_cues` draws the same figure and explains it.

# %%
result = attention_cues(10)
print(result.paragraph)
result.figures["attention_cues"]

# %% [markdown]
# Pooling values with these one-hot weights returns the values unchanged: attention is a soft lookup,
# and the identity is the hardest possible one.

# %%
values = torch.arange(10.0).reshape(10, 1)
pooled = weights[0, 0] @ values
assert torch.equal(pooled, values)
pooled.T
