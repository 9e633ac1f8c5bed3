# %% [markdown]
# # 11.3 Attention scoring functions
#
# Section 11.2 scored a key by its distance to the query. In general a *scoring function* `a(q, k)` gives
# each key a number, a softmax turns the numbers into weights, and the weights pool the values. This
# notebook covers the pieces every later model uses: `masked_softmax` (padded keys get weight 0),
# additive attention (queries and keys of different sizes), and scaled dot-product attention — and why
# the dot product is divided by the square root of the key size.

# %%
# %matplotlib inline
import os

import torch

from attnlab.attention import (
    AdditiveAttention,
    DotProductAttention,
    MultiplicativeAttention,
    masked_softmax,
    record_attention,
)
from attnlab.chapter import TableView, scaling
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
_ = torch.manual_seed(0)  # one seed for the whole notebook

# %% [markdown]
# ## Masked softmax
#
# Sentences in a batch have different lengths, so keys beyond a sentence's end are padding. The book's
# `valid_lens` says how many keys each batch row (shape `(B,)`) or each query (shape `(B, Lq)`) may see;
# the rest get exactly 0. A query that sees no key gets a row of zeros, never NaN.

# %%
X = torch.rand(2, 2, 4)
print(masked_softmax(X, torch.tensor([2, 3])))  # per batch: the first 2 or 3 keys
print(masked_softmax(X, torch.tensor([[1, 3], [2, 4]])))  # per query
print(masked_softmax(X, torch.tensor([0, 4]))[0])  # no visible key: zeros, not NaN

# %% [markdown]
# ## Additive attention
#
# `a(q, k) = w_v^T tanh(W_q q + W_k k)`: a one-hidden-layer network scores each pair, so queries (here of
# size 20) and keys (size 2) need not match. Ten keys, two batch rows that may see 2 and 6 of them. In the
# heatmap look for the masked keys: they must be blank beyond key 2 in batch 0 and beyond key 6 in batch 1.

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
# The untrained scorer spreads weight almost evenly over the visible keys (its scores are small), and the
# padded keys get none: the mask, not the scores, decides what is seen.
#
# ## Scaled dot-product attention
#
# When queries and keys have the same size *d*, the dot product `q·k / sqrt(d)` scores them with no
# parameters at all — the Transformer's choice, and the fastest (attnlab runs it through PyTorch's fused
# `scaled_dot_product_attention` unless weights are being recorded). Here *d* = 2; the same masked keys.

# %%
queries = torch.normal(0, 1, (2, 1, 2))
attention = DotProductAttention(dropout=0.5).eval()
with record_attention(attention) as rec:
    print(attention(queries, keys, values, valid_lens).shape)
(w,) = [ws[0] for ws in rec.weights.values()]
show_heatmaps(w.reshape(1, 2, 1, 10).detach(), xlabel="Keys", ylabel="Queries", titles=["batch 0", "batch 1"])

# %% [markdown]
# Now the weights differ from key to key: random queries and keys give dot products of different sizes.
# Masked keys are again blank.
#
# ## Why divide by sqrt(d)?
#
# For random unit-variance queries and keys, `q·k` is a sum of *d* products, so its variance grows like
# *d*. Large scores saturate the softmax: one key takes almost all the weight and the gradient through
# the softmax vanishes. The table and figure below measure this; look at the unscaled columns grow with
# `d_k` and the scaled ones stay put.

# %%
result = scaling(dims=(8, 64, 512), samples=200 if SMALL else 1000)
TableView(*result.tables[0])

# %%
result.figures["scaling"]

# %% [markdown]
# Unscaled, the variance of the scores equals `d_k`, the largest weight approaches 1 and the softmax's
# Jacobian shrinks; divided by `sqrt(d_k)`, the variance stays near 1 and the softmax stays sensitive at
# every size. In the chapter's words:

# %%
print(result.paragraph)

# %% [markdown]
# ## Exercise 1: the mask is a -inf score
#
# Show that `masked_softmax(X, valid_lens)` equals a plain softmax after setting the scores of the masked
# keys to `-inf`, for the `X` of the first cell and `valid_lens = [2, 3]`.

# %% tags=["solution"]
lens = torch.tensor([2, 3])
hidden = torch.arange(4)[None, None, :] >= lens[:, None, None]  # (B, 1, Lk): True = padded
reference = torch.softmax(X.masked_fill(hidden, float("-inf")), dim=-1)
torch.testing.assert_close(masked_softmax(X, lens), reference)
print("masked_softmax == softmax with -inf scores on the padded keys")

# %% [markdown]
# ## Exercise 2: a learned bilinear score
#
# `MultiplicativeAttention(query_size, key_size)` scores `q^T W k` (Luong's "general" score): like additive
# attention it bridges different sizes, at the cost of one matrix product. Use it on the size-20 queries
# and size-2 keys above and check the weights: every row sums to 1 and the padded keys get 0.

# %% tags=["solution"]
queries20 = torch.normal(0, 1, (2, 1, 20))
bilinear = MultiplicativeAttention(query_size=20, key_size=2).eval()
with record_attention(bilinear) as rec:
    print(bilinear(queries20, keys, values, valid_lens).shape)
(w,) = [ws[0][:, 0] for ws in rec.weights.values()]  # recorded as (B, 1 head, Lq, Lk) -> (B, Lq, Lk)
torch.testing.assert_close(w.sum(-1), torch.ones(2, 1))
assert float(w[0, 0, 2:].abs().sum()) == 0.0 and float(w[1, 0, 6:].abs().sum()) == 0.0
print("rows sum to 1; padded keys get exactly 0")

# %% [markdown]
# ## Exercise 3: the variance of a dot product
#
# Check the claim behind the scaling by sampling: for q, k ~ N(0, I_d) the variance of `q·k` is *d*, and
# of `q·k / sqrt(d)` is 1. Use 20,000 pairs at d = 64 and allow a 5% error.

# %% tags=["solution"]
d, n = 64, 20_000
gen = torch.Generator().manual_seed(0)
q, k = torch.randn(n, d, generator=gen), torch.randn(n, d, generator=gen)
dots = (q * k).sum(-1)
print(f"Var(q.k) = {dots.var():.1f} (d = {d});  Var(q.k / sqrt d) = {(dots / d**0.5).var():.3f}")
assert abs(float(dots.var()) / d - 1) < 0.05 and abs(float((dots / d**0.5).var()) - 1) < 0.05
