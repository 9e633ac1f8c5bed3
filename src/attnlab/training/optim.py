"""Optimizer and learning-rate schedule: Adam/AdamW with nanoGPT's parameter groups, and the
Transformer paper's warmup + inverse-square-root schedule, a constant rate (as the book), or a budgeted
decay to zero at the end of the run (linear or cosine, Li et al., "Budgeted Training", ICLR 2020)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.autograd.graph import increment_version

from attnlab.attention import PositionalEncoding, T5RelativeBias
from attnlab.training.config import BUDGETED_SCHEDULES

if TYPE_CHECKING:
    from attnlab.training.config import TrainConfig


def learning_rate(step: int, cfg: TrainConfig, progress: float = 0.0) -> float:
    """lr for optimizer update `step` (1-based), `progress` in [0, 1] being the fraction of the run spent
    before it (`StopPolicy.progress`; clipped to [0, 1], read only by 'linear' and 'cosine').

    - 'constant': cfg.lr.
    - 'inverse_sqrt': linear warmup to cfg.lr, then cfg.lr * sqrt(warmup / step) — the paper's schedule
      with the peak set directly (as fairseq).
    - 'linear', 'cosine': linear warmup over cfg.warmup_steps to cfg.lr, times a decay that is zero at
      progress 1: `1 - p`, or `0.5 * (1 + cos(pi * p))`. A time budget counts per invocation, so a
      resumed run's rate decays to zero again at the end of the resumed invocation's budget; a run under
      max_steps alone resumes on the very same rates.

    Examples:
        >>> from attnlab.training.config import TrainConfig
        >>> cfg = TrainConfig(lr=1e-3, schedule="linear", warmup_steps=10, max_steps=100, device="cpu")
        >>> learning_rate(5, cfg, progress=0.04), learning_rate(51, cfg, progress=0.5), learning_rate(100, cfg, 1.0)
        (0.00048, 0.0005, 0.0)
    """
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule not in BUDGETED_SCHEDULES:  # inverse_sqrt
        warmup = max(1, cfg.warmup_steps)
        return cfg.lr * min(step / warmup, math.sqrt(warmup / max(step, 1)))
    warm = min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps > 0 else 1.0
    p = min(max(progress, 0.0), 1.0)
    decay = 1.0 - p if cfg.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * p))
    return cfg.lr * warm * decay


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """nanoGPT's optimizer groups: weight decay on matrices only (`p.dim() >= 2`: projections,
    token embeddings), never on biases, LayerNorm gains or position tables (learned positions, T5's
    relative-position bias)."""

    tables = (PositionalEncoding, T5RelativeBias)
    positions = {id(p) for m in model.modules() if isinstance(m, tables) for p in m.parameters()}
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for p in model.parameters():  # each tied parameter once
        if p.requires_grad:
            (decay if p.dim() >= 2 and id(p) not in positions else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _bump_versions(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    # The fused kernel writes the parameters without bumping their version counters, which is how
    # MultiHeadAttention knows its cached W_q|W_k|W_v concatenation (used without autograd) is stale.
    increment_version([p for group in optimizer.param_groups for p in group["params"]])


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam or AdamW over `param_groups`, as one fused kernel where torch has one for these parameters.

    torch's default on CPU is a Python loop over parameters (one small op per tensor per update; a
    profile put ~12% of a small model's step in it); `fused=True` (CPU and CUDA, float parameters) does
    the whole update in one kernel per group, `foreach=True` (the fallback) in a few batched ops. The
    state dict is the same either way, so checkpoints move between them.
    """
    opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    kwargs: dict[str, Any] = {"lr": learning_rate(1, cfg), "betas": cfg.betas, "eps": cfg.eps}
    params = [p for g in param_groups(model, cfg.weight_decay) for p in g["params"]]
    if params and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params):
        try:  # (fresh groups each try: the constructor writes its settings into the group dicts)
            opt = opt_cls(param_groups(model, cfg.weight_decay), fused=True, **kwargs)
        except (RuntimeError, ValueError):  # an older torch or an unsupported dtype/device
            pass
        else:
            opt.register_step_post_hook(_bump_versions)
            return opt
    return opt_cls(param_groups(model, cfg.weight_decay), foreach=bool(params) or None, **kwargs)
