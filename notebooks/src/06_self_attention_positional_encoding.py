# %% [markdown]
# # 11.6 Self-attention and positional encoding
#
# In *self-attention* the queries, keys and values all come from one sequence: every token attends to
# every token of its own sentence, so a representation of each word can draw on the whole sentence in one
# step (an RNN needs *n* sequential steps to connect the first and last word). The price: attention has no
# notion of order — permute the tokens and the outputs permute with them (exercise 1). The Transformer
# therefore *adds* a positional encoding to its inputs: sines and cosines of geometrically spaced
# frequencies.

# %%
# %matplotlib inline
import os

import torch

from attnlab.attention import MultiHeadAttention, PositionalEncoding
from attnlab.chapter import TableView, positional_encoding, rotation_matrix

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
_ = torch.manual_seed(0)  # one seed for the whole notebook

# %% [markdown]
# ## Self-attention keeps the shape
#
# The same tensor is passed as queries, keys and values; the output has one vector per input token.

# %%
num_hiddens, num_heads = 100, 5
attention = MultiHeadAttention(num_hiddens, num_heads, dropout=0.5).eval()
batch_size, num_queries, valid_lens = 2, 4, torch.tensor([3, 2])
X = torch.ones((batch_size, num_queries, num_hiddens))
print(attention(X, X, X, valid_lens).shape)  # (B, L, D): same shape in, same shape out

# %% [markdown]
# ## The sinusoidal encoding
#
# Position *p* gets `PE[p, 2j] = sin(p / 10000^(2j/d))` and `PE[p, 2j+1] = cos(…)`. `PositionalEncoding` is
# the module the Transformer runs; fed zeros in eval mode its output *is* the table. In the first figure
# look at the frequency of each plotted column: low columns oscillate fast, high columns slowly. In the
# heatmap (positions down, dimensions across) the same shows as stripes that widen to the right.

# %%
encoding_dim, num_steps = 32, 60
pos_encoding = PositionalEncoding(encoding_dim, dropout=0).eval()
P = pos_encoding(torch.zeros((1, num_steps, encoding_dim)))[0]  # (L, D): the encoding alone
result = positional_encoding(encoding_dim, 30 if SMALL else num_steps)
result.figures["pe_columns"]

# %%
result.figures["pe_heatmap"]

# %% [markdown]
# Like the bits of a binary counter — the lowest bit flips every step, the next every two steps — each
# column pair runs at its own rate, and together they give every position a distinct code. The chapter
# lines the encoding up with the binary numbers:

# %%
TableView(*result.tables[0])

# %% [markdown]
# ## Relative positions
#
# For a fixed offset *k* there is one matrix `M_k` (a rotation in each (sin, cos) pair) with
# `PE(p + k) = M_k PE(p)` for **every** *p*: a model can learn to attend "three words back" with one linear
# map, wherever the words are. The chapter checks it, and the encoding against the formula, numerically:

# %%
TableView(*result.tables[1])

# %% [markdown]
# Both errors are at float32 rounding level: the table is the paper's formula, and the shift property
# holds exactly up to rounding.

# %% [markdown]
# ## Exercise 1: without positions, order is invisible
#
# Permute the 6 tokens of a random sequence and run self-attention on both orders. Show the outputs are
# the same rows, permuted (self-attention is permutation-*equivariant*). Then add the positional encoding
# first and show this no longer holds.

# %% tags=["solution"]
Z = torch.randn(1, 6, num_hiddens)
perm = torch.randperm(6)
out, out_perm = attention(Z, Z, Z), attention(Z[:, perm], Z[:, perm], Z[:, perm])
torch.testing.assert_close(out[:, perm], out_perm, atol=1e-5, rtol=1e-5)
pe = PositionalEncoding(num_hiddens, dropout=0).eval()
with_pos, with_pos_perm = pe(Z), pe(Z[:, perm])
moved = attention(with_pos, with_pos, with_pos)[:, perm] - attention(with_pos_perm, with_pos_perm, with_pos_perm)
assert float(moved.abs().max()) > 1e-3
print("without positions: outputs permute with the inputs; with them: they change")

# %% [markdown]
# ## Exercise 2: one matrix for one offset
#
# Take `M_3 = rotation_matrix(3, 32)` and check `P[p + 3] = M_3 P[p]` for every position *p* of the table
# `P` computed above (to 1e-4).

# %% tags=["solution"]
M = rotation_matrix(3, encoding_dim).to(P.dtype)
shifted = P[:-3] @ M.T  # row p -> M_3 PE(p)
torch.testing.assert_close(shifted, P[3:], atol=1e-4, rtol=0)
print(f"PE(p + 3) == M_3 PE(p) for all {P.shape[0] - 3} positions")

# %% [markdown]
# ## Exercise 3: closeness of positions
#
# The dot product `PE(p)·PE(q)` depends only on `p - q` (it is a sum of `cos(w_j (p - q))`). Check that
# it is the same for the pairs (0, 5), (10, 15) and (40, 45), and that it decreases, on the whole, as
# positions move apart.

# %% tags=["solution"]
dots = [float(P[a] @ P[a + 5]) for a in (0, 10, 40)]
print("PE(p)·PE(p+5) at p = 0, 10, 40:", [round(d, 4) for d in dots])
assert max(dots) - min(dots) < 1e-4
near, far = float(P[0] @ P[1]), float(P[0] @ P[30])
assert near > far
print(f"PE(0)·PE(1) = {near:.2f} > PE(0)·PE(30) = {far:.2f}")
