"""A pruned Transformer (`attnlab heads --prune`) in its unpruned shape, for formats that need the same
number of heads in every attention module (Marian's config and CTranslate2's spec each take one
`num_heads`).

Each pruned head comes back with zero query, key and value weights and biases and zero columns in the
output projection: its attention still runs but contributes exactly nothing, so the model computes what
the pruned one does (and a module with every head pruned adds only its output bias, as attnlab's does).
The export is as large and as fast as the unpruned model; the pruning shows only in its outputs.
"""

from __future__ import annotations

import dataclasses

import torch

from attnlab.models import Transformer


def restore_pruned_heads(model: Transformer) -> Transformer:
    """`model` itself when nothing is pruned, else an equal unpruned-shape copy with zeros for the pruned heads."""
    pruned = model.config.pruned_heads
    if not pruned:
        return model
    if model.config.kv_heads != model.config.num_heads:
        raise ValueError("a pruned grouped-query Transformer has no unpruned-shape copy in this format")
    cfg = dataclasses.replace(model.config, pruned_heads=None)
    full = Transformer(cfg).eval()
    H, Dh = cfg.num_heads, cfg.num_hiddens // cfg.num_heads  # pruning keeps each head's size
    target, source = full.state_dict(), model.state_dict()
    with torch.no_grad():
        for key, value in source.items():
            if key in target and target[key].shape == value.shape:
                target[key].copy_(value)
        for name, removed in pruned.items():
            rows = torch.tensor([h * Dh + i for h in range(H) if h not in removed for i in range(Dh)], dtype=torch.long)
            for proj in ("W_q", "W_k", "W_v"):
                for part in ("weight", "bias"):
                    key = f"{name}.{proj}.{part}"
                    if key in target:
                        target[key].zero_()
                        target[key][rows] = source[key]
            target[f"{name}.W_o.weight"].zero_()
            target[f"{name}.W_o.weight"][:, rows] = source[f"{name}.W_o.weight"]
    return full


__all__ = ["restore_pruned_heads"]
