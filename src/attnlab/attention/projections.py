"""Projections side by side: several nn.Linear layers of one input run as one matmul.

concatenated(layers)                        -> one nn.Linear whose output is the layers' outputs side by side
concatenated_weight(store, key, layers)     -> (weight, bias, packed weight or None), kept until one changes
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.inference.packed import PackedLinear, can_pack, pack_weight, weight_key

__all__ = ["concatenated", "concatenated_weight"]


def concatenated(layers: list[nn.Linear]) -> nn.Linear:
    """One nn.Linear computing `layers` (of one input size, all with or all without bias) side by side, on
    their device and dtype: its output is their outputs concatenated on the last dimension.

    Examples:
        >>> a, b = nn.Linear(4, 2), nn.Linear(4, 3)
        >>> x = torch.randn(5, 4)
        >>> torch.allclose(concatenated([a, b])(x), torch.cat([a(x), b(x)], -1))
        True
    """
    first = layers[0]
    fused = nn.Linear(first.in_features, sum(w.out_features for w in layers), bias=first.bias is not None)
    fused.to(device=first.weight.device, dtype=first.weight.dtype)
    with torch.no_grad():
        fused.weight.copy_(torch.cat([w.weight for w in layers]))
        if fused.bias is not None:
            fused.bias.copy_(torch.cat([w.bias for w in layers]))
    return fused.train(first.training)


def concatenated_weight(store: dict, key: str, layers: list[nn.Linear]) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The layers' weights (and biases) concatenated: (sum N, K), (sum N,), and that weight reordered for oneDNN
    when the layers are `PackedLinear`s (else None). Under autograd (training) the concatenation is part of the
    graph; without it (decoding) the result is kept in `store[key]` until a weight changes in place, moves or
    changes dtype (`weight_key`), not redone per step."""
    ws: list[Tensor] = [m.weight for m in layers]
    bs: list[Tensor] | None = None if layers[0].bias is None else [m.bias for m in layers]
    if torch.is_grad_enabled():
        return torch.cat(ws), None if bs is None else torch.cat(bs), None
    params = ws + (bs or [])
    # The layers' type is part of the key: packing them in place (pack_linears) rebuilds it.
    versions = [type(layers[0]), *(weight_key(t) for t in params)]
    cached = store.get(key)  # (params, versions, W, b, packed); holding the params keeps their identity
    # meaningful (a freed tensor's address could be reused by a new one)
    if (
        cached is None
        or len(cached[0]) != len(params)
        or any(x is not y for x, y in zip(cached[0], params))
        or cached[1] != versions
    ):
        # Made outside inference mode: an inference tensor could not be packed (no version counter), and its
        # staleness is the Parameters' to tell anyway (`versions`).
        with torch.inference_mode(False):
            W = torch.cat([w.detach() for w in ws])
            b = None if bs is None else torch.cat([t.detach() for t in bs])
        packed = pack_weight(W) if type(layers[0]) is PackedLinear and can_pack(W) else None
        cached = (params, versions, W, b, packed)
        store[key] = cached
    return cached[2], cached[3], cached[4]
