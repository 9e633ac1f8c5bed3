# %% [markdown]
# # Attention scoring functions and masked softmax
#
# Scores a(q, k) become weights through a softmax; `masked_softmax` ignores padded keys
# (`valid_lens`), and a query that sees no key gets a row of zeros, never NaN.

# %%
import os

import torch

from attnlab.attention import (
    AdditiveAttention,
    DotProductAttention,
    masked_softmax,
    record_attention,
)
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)

# %%
X = torch.rand(2, 2, 4)
print(masked_softmax(X, torch.tensor([2, 3])))  # per batch: the first 2 or 3 keys
print(masked_softmax(X, torch.tensor([[1, 3], [2, 4]])))  # per query
print(masked_softmax(X, torch.tensor([0, 4]))[0])  # no visible key: zeros, not NaN

# %% [markdown]
# ## Additive attention (queries and keys of different sizes)

# %%
queries, keys = torch.normal(0, 1, (2, 1, 20)), torch.normal(0, 1, (2, 10, 2))
values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
valid_lens = torch.tensor([2, 6])
attention = AdditiveAttention(num_hiddens=8, dropout=0.1).eval()
with record_attention(attention) as rec:
    out = attention(queries, keys, values, valid_lens)
print(out.shape)  # (B, Lq, value size)
(w,) = [ws[0] for ws in rec.weights.values()]
show_heatmaps(w.reshape(1, 2, 1, 10).detach(), xlabel="Keys", ylabel="Queries", titles=["batch 0", "batch 1"])

# %% [markdown]
# ## Scaled dot-product attention (queries and keys of one size)

# %%
queries = torch.normal(0, 1, (2, 1, 2))
attention = DotProductAttention(dropout=0.5).eval()
with record_attention(attention) as rec:
    print(attention(queries, keys, values, valid_lens).shape)
(w,) = [ws[0] for ws in rec.weights.values()]
show_heatmaps(w.reshape(1, 2, 1, 10).detach(), xlabel="Keys", ylabel="Queries", titles=["batch 0", "batch 1"])
