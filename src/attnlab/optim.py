"""Optimizer and learning-rate schedule: Adam/AdamW with nanoGPT's parameter groups, and the
Transformer paper's warmup + inverse-square-root schedule (or a constant rate, as the book)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from attnlab.train import TrainConfig


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """lr for optimizer update `step` (1-based): constant, or linear warmup to cfg.lr then
    cfg.lr * sqrt(warmup / step) — the paper's schedule with the peak set directly (as fairseq)."""
    if cfg.schedule == "constant":
        return cfg.lr
    warmup = max(1, cfg.warmup_steps)
    return cfg.lr * min(step / warmup, math.sqrt(warmup / max(step, 1)))


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """nanoGPT's optimizer groups: weight decay on matrices only (`p.dim() >= 2`: projections,
    token embeddings), never on biases, LayerNorm gains or position tables (learned positions)."""
    from attnlab.attention import PositionalEncoding

    positions = {id(p) for m in model.modules() if isinstance(m, PositionalEncoding) for p in m.parameters()}
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for p in model.parameters():  # each tied parameter once
        if p.requires_grad:
            (decay if p.dim() >= 2 and id(p) not in positions else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return opt_cls(param_groups(model, cfg.weight_decay), lr=learning_rate(1, cfg), betas=cfg.betas, eps=cfg.eps)
