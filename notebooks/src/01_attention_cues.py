# %% [markdown]
# # 11.1 Queries, keys and values
#
# A database answers a query by looking up the key that matches it and returning that key's value.
# Attention does the same softly: every key gets a *weight* — how well it matches the query — and the
# answer is the weighted average of the values. The weights of one query are non-negative and sum to 1,
# so attention pooling always returns a convex combination of the values it was given.
#
# This notebook draws the chapter's first picture (weights that make each query attend only to itself),
# pools values with it, and then softens the weights to see the lookup turn into an average.

# %%
# %matplotlib inline
import os

import torch

from attnlab.attention import masked_softmax
from attnlab.chapter.cues import attention_cues
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"  # CI runs every notebook in seconds with ATTNLAB_SMALL=1

# %% [markdown]
# ## The identity as attention weights
#
# Ten queries and ten keys; query *i* matches key *i* and nothing else. `show_heatmaps` takes a
# `(rows, columns, queries, keys)` tensor — one heatmap per (row, column), here a single one. Look for a
# dark diagonal on a white background: each row (a query) puts all its weight on one column (a key).

# %%
weights = torch.eye(10).reshape((1, 1, 10, 10))  # (rows, cols, queries, keys): one heatmap
show_heatmaps(weights, xlabel="Keys", ylabel="Queries")

# %% [markdown]
# Every row holds a single 1: the hardest possible lookup, exactly what a database does.
# `attnlab.chapter.attention_cues` draws the same figure and says what it means — the paragraph the
# demo's report prints beside it.

# %%
result = attention_cues(10)
print(result.paragraph)

# %% [markdown]
# ## Pooling values
#
# Pooling is a matrix product: weights `(queries, keys)` times values `(keys, features)`. With one-hot
# rows it copies each query's value — attention as lookup.

# %%
values = torch.arange(10.0).reshape(10, 1)
pooled = weights[0, 0] @ values
assert torch.equal(pooled, values)
pooled.T

# %% [markdown]
# ## From lookup to average
#
# Real attention computes weights from scores with a softmax. Scores `-|i - j| / t` make a query prefer
# nearby keys; the temperature *t* sets how strongly. Before the figure, predict: at a small *t* the rows
# should look like the identity, at a large *t* like a uniform smear.

# %%
positions = torch.arange(10.0)
distance = (positions[:, None] - positions[None, :]).abs()  # (queries, keys)
temperatures = [0.1, 1.0, 10.0]
soft = torch.stack([torch.softmax(-distance / t, dim=-1) for t in temperatures])[None]  # (1, 3, 10, 10)
show_heatmaps(soft, xlabel="Keys", ylabel="Queries", titles=[f"t = {t:g}" for t in temperatures])

# %% [markdown]
# At t = 0.1 the weights are the identity again; at t = 1 each query spreads over a few neighbours; at
# t = 10 almost evenly over all ten keys, and pooling returns nearly the mean of the values. Every row
# still sums to 1 — what changes is only how the mass is spread:

# %%
for t, w in zip(temperatures, soft[0]):
    print(f"t = {t:>4g}: rows sum to {w.sum(-1).mean():.3f}; query 0 pools {float(w[0] @ values):.2f}")

# %% [markdown]
# ## Exercise 1: uniform weights are average pooling
#
# Give every one of the ten keys the same weight. Show that pooling returns the mean of the values for
# every query, and that `torch.softmax` of any constant score row gives these weights.

# %% tags=["solution"]
uniform = torch.full((10, 10), 1 / 10)
torch.testing.assert_close(uniform @ values, values.mean().expand(10, 1))
torch.testing.assert_close(torch.softmax(torch.full((10, 10), 3.7), dim=-1), uniform)
print("uniform weights pool the mean:", float((uniform @ values)[0]))

# %% [markdown]
# ## Exercise 2: a lookup with missing keys
#
# A padded batch has keys that must not be looked at. With `masked_softmax(scores, valid_lens)` let the
# first query see 3 keys and the second only 1 (scores all zero). What are the weights? What does a query
# that sees **no** key get?

# %% tags=["solution"]
scores = torch.zeros(1, 2, 5)  # (batch, queries, keys)
w = masked_softmax(scores, torch.tensor([[3, 1]]))
print(w)
torch.testing.assert_close(w[0, 0], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0, 0]))
torch.testing.assert_close(w[0, 1], torch.tensor([1.0, 0, 0, 0, 0]))
empty = masked_softmax(scores, torch.tensor([0]))
assert torch.equal(empty, torch.zeros_like(empty))  # zeros, never NaN and never uniform weights
print("no visible key -> a row of zeros")

# %% [markdown]
# ## Exercise 3: the temperature that makes a lookup
#
# How small must the temperature be before query 0's weight on its own key exceeds 0.99? Find it
# numerically and check it against the closed form: with scores `-|i-j|/t` the weight of key 0 is
# `1 / sum_j exp(-j/t)`.

# %% tags=["solution"]
def self_weight(t: float) -> float:
    return float(torch.softmax(-distance[0] / t, dim=-1)[0])


t = 1.0
while self_weight(t) <= 0.99:
    t *= 0.9
closed_form = 1 / sum(torch.exp(-torch.arange(10.0) / t)).item()
assert abs(self_weight(t) - closed_form) < 1e-6 and self_weight(t) > 0.99
print(f"t = {t:.3f}: weight on its own key {self_weight(t):.4f}")
