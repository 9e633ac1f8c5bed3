# %% [markdown]
# # Multi-head attention
#
# h heads each attend in their own learned subspace of size d/h; their outputs are concatenated and
# projected. The projections `W_q, W_k, W_v, W_o` are plain `nn.Linear`s, as in the book.

# %%
import os

import torch

from attnlab.attention import MultiHeadAttention, record_attention
from attnlab.viz.heatmaps import show_heatmaps

SMALL = os.environ.get("ATTNLAB_SMALL") == "1"
torch.manual_seed(0)

# %%
num_hiddens, num_heads = 100, 5
attention = MultiHeadAttention(num_hiddens, num_heads, dropout=0.5).eval()
batch_size, num_queries, num_kvpairs = 2, 4, 6
valid_lens = torch.tensor([3, 2])
X = torch.ones((batch_size, num_queries, num_hiddens))
Y = torch.ones((batch_size, num_kvpairs, num_hiddens))
print(attention(X, Y, Y, valid_lens).shape)  # (B, Lq, D)

# %% [markdown]
# Recording switches to the explicit math path and keeps every head's weights, (B, H, Lq, Lk).
# With random inputs each head looks somewhere else; padded keys (beyond `valid_lens`) get weight 0.

# %%
X, Y = torch.randn(batch_size, num_queries, num_hiddens), torch.randn(batch_size, num_kvpairs, num_hiddens)
with record_attention(attention) as rec:
    attention(X, Y, Y, valid_lens)
(w,) = [ws[0] for ws in rec.weights.values()]
print(w.shape)
show_heatmaps(w[:1].detach(), xlabel="Keys", ylabel="Queries", titles=[f"head {h + 1}" for h in range(num_heads)])

# %% [markdown]
# The fused path (`F.scaled_dot_product_attention`) and the recorded path agree.

# %%
fast = attention(X, Y, Y, valid_lens)
with record_attention(attention):
    slow = attention(X, Y, Y, valid_lens)
torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
print("fused == math path")
