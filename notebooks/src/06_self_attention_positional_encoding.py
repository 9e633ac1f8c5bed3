# %% [markdown]
# # Self-attention and positional encoding
#
# In self-attention queries, keys and values are the same sequence. Attention ignores order, so
# positions are added to the inputs: the sinusoidal encoding, whose shift by k positions is one fixed
# rotation for every position.

# %%
import os

import torch

from attnlab.attention import MultiHeadAttention, PositionalEncoding
from attnlab.chapter.self_attention import positional_encoding

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)

# %%
num_hiddens, num_heads = 100, 5
attention = MultiHeadAttention(num_hiddens, num_heads, dropout=0.5).eval()
batch_size, num_queries, valid_lens = 2, 4, torch.tensor([3, 2])
X = torch.ones((batch_size, num_queries, num_hiddens))
print(attention(X, X, X, valid_lens).shape)  # (B, L, D): same shape in, same shape out

# %%
encoding_dim, num_steps = 32, 60
pos_encoding = PositionalEncoding(encoding_dim, dropout=0).eval()
X = pos_encoding(torch.zeros((1, num_steps, encoding_dim)))
P = X[0]  # (L, D): the encoding alone
print(P.shape)

# %% [markdown]
# `attnlab.chapter.positional_encoding()` plots the columns, shows the binary-counting analogy and checks
# PE(pos + k) = M_k PE(pos) numerically.

# %%
result = positional_encoding(encoding_dim, 30 if SMALL else num_steps)
print(result.paragraph)
print("max rotation error:", result.data["rotation_max_error"])
next(iter(result.figures.values()))
