"""A fused optimizer step must not leave MultiHeadAttention's cached W_q|W_k|W_v concatenation stale."""

from __future__ import annotations

import torch

from attnlab.attention import MultiHeadAttention
from attnlab.training.config import TrainConfig
from attnlab.training.optim import build_optimizer


def test_no_grad_forward_after_a_step_uses_the_new_weights():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    opt = build_optimizer(mha, TrainConfig(lr=0.1))
    with torch.no_grad():
        mha(x, x, x)  # caches the concatenated projection
    mha(x, x, x).sum().backward()
    opt.step()
    with torch.no_grad():
        after = mha(x, x, x)
    mha.__dict__.pop("_qkv_cached", None)
    with torch.no_grad():
        fresh = mha(x, x, x)
    torch.testing.assert_close(after, fresh)
