# %% [markdown]
# # 11.5 Multi-head attention
#
# One attention pooling computes one kind of relation between queries and keys. Multi-head attention runs
# *h* of them side by side: each head projects queries, keys and values into its own subspace of size
# *d/h* with learned matrices, attends there, and the *h* outputs are concatenated and projected back by
# `W_o`. The total cost is about that of one full-size head, but different heads can specialise — one on
# the previous word, another on the verb, …
#
# In attnlab the projections `W_q, W_k, W_v, W_o` are plain `nn.Linear`s, as in the book, so weights copy
# to and from PyTorch's own `nn.MultiheadAttention` (exercise 1).

# %%
# %matplotlib inline
import os

import torch
from torch import nn

from attnlab.attention import MultiHeadAttention, record_attention
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
_ = torch.manual_seed(0)  # one seed for the whole notebook

# %% [markdown]
# ## Shapes
#
# `d = 100` features split over 5 heads of 20; 4 queries attend over 6 key–value pairs, of which the two
# batch rows may see 3 and 2. The output has the queries' shape: `(B, Lq, d)`.

# %%
num_hiddens, num_heads = 100, 5
attention = MultiHeadAttention(num_hiddens, num_heads, dropout=0.5).eval()
batch_size, num_queries, num_kvpairs = 2, 4, 6
valid_lens = torch.tensor([3, 2])
X = torch.ones((batch_size, num_queries, num_hiddens))
Y = torch.ones((batch_size, num_kvpairs, num_hiddens))
print(attention(X, Y, Y, valid_lens).shape)  # (B, Lq, D)

# %% [markdown]
# ## Every head's weights
#
# Recording switches to the explicit math path and keeps the weights of every head, `(B, H, Lq, Lk)`. With
# random inputs and untrained projections, look for two things in the five heatmaps of batch row 0: the
# heads do *not* agree with each other, and keys 4–6 (beyond `valid_lens = 3`) are blank in all of them.

# %%
X, Y = torch.randn(batch_size, num_queries, num_hiddens), torch.randn(batch_size, num_kvpairs, num_hiddens)
with record_attention(attention) as rec:
    attention(X, Y, Y, valid_lens)
(w,) = [ws[0] for ws in rec.weights.values()]
print(w.shape)
show_heatmaps(w[:1].detach(), xlabel="Keys", ylabel="Queries", titles=[f"head {h + 1}" for h in range(num_heads)])

# %% [markdown]
# Each head has its own projections, so the same queries and keys give five different patterns. Training
# (section 11.7, and `attnlab heads` on a trained run) turns these random patterns into useful ones.
#
# ## Fast by default, weights on request
#
# Without a recording, attnlab calls PyTorch's fused `scaled_dot_product_attention`, which never builds the
# `(B, H, Lq, Lk)` weights. Both paths compute the same output:

# %%
fast = attention(X, Y, Y, valid_lens)
with record_attention(attention):
    slow = attention(X, Y, Y, valid_lens)
torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
print("fused == math path, largest difference", float((fast - slow).abs().max()))

# %% [markdown]
# ## Exercise 1: the same layer as PyTorch's
#
# Copy the weights of `attention` into `torch.nn.MultiheadAttention(100, 5, bias=False, batch_first=True)`
# (its `in_proj_weight` stacks W_q, W_k, W_v; `out_proj` is W_o) and check the outputs agree. Careful:
# PyTorch's `key_padding_mask` means *True = ignore*, attnlab's masks *True = may attend*.

# %% tags=["solution"]
ref = nn.MultiheadAttention(num_hiddens, num_heads, bias=False, batch_first=True).eval()
with torch.no_grad():
    ref.in_proj_weight.copy_(torch.cat([attention.W_q.weight, attention.W_k.weight, attention.W_v.weight]))
    ref.out_proj.weight.copy_(attention.W_o.weight)
padding = torch.arange(num_kvpairs)[None, :] >= valid_lens[:, None]  # True = a padded key (PyTorch's meaning)
expected, _ = ref(X, Y, Y, key_padding_mask=padding)
torch.testing.assert_close(attention(X, Y, Y, valid_lens), expected, atol=1e-5, rtol=1e-5)
print("attnlab's MultiHeadAttention == torch.nn.MultiheadAttention with the same weights")

# %% [markdown]
# ## Exercise 2: more heads, same cost
#
# Count the parameters of `MultiHeadAttention(100, h)` for h = 1, 2, 5, 10 and explain the result.

# %% tags=["solution"]
counts = {h: sum(p.numel() for p in MultiHeadAttention(100, h).parameters()) for h in (1, 2, 5, 10)}
print(counts)
assert set(counts.values()) == {4 * 100 * 100}  # four d x d projections, whatever the split into heads
print("heads split d into h subspaces of d/h: the projections stay d x d, so the count does not change")

# %% [markdown]
# ## Exercise 3: a head that looks at its own position
#
# Make head 1 attend only to the key at the query's own position, by hand: set its slice of `W_q` and
# `W_k` to a large multiple of the same matrix, so `q·k` is largest when query and key are the same vector.
# Feed a self-attention input (queries = keys) and check head 1's weights are close to the identity.

# %% tags=["solution"]
probe = MultiHeadAttention(num_hiddens, num_heads).eval()
head = slice(0, num_hiddens // num_heads)  # head 1's rows of W_q and W_k
with torch.no_grad():
    probe.W_q.weight[head] = probe.W_k.weight[head] * 10
Z = torch.randn(1, 6, num_hiddens)
with record_attention(probe) as rec:
    probe(Z, Z, Z)
(w,) = [ws[0] for ws in rec.weights.values()]
print(w[0, 0].diagonal())
assert float(w[0, 0].diagonal().min()) > 0.9
