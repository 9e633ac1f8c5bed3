"""Greedy's per-step choice without a full log-softmax (`csrc/argmax.c`, and its PyTorch fallback): the
arg-max of the logits, and (only when asked) the chosen token's log-probability as logit - logsumexp(row).

Why: at small model sizes the output layer is the largest matmul of a decoding step, and
`log_softmax(logits).max(-1)` over its (B, V) result costs a large share of that matmul again
(BENCHMARKS.md, "Precision, int8 and CTranslate2"): two passes with an exp per logit, then a `max` with
indices, which PyTorch runs as a scalar loop. The arg-max of the logits is the arg-max of their log-softmax
(the same row shift), so:

    argmax_rows(logits)            -> (B,) first index of each row's maximum, as `logits.max(-1)` gives
    pick(logits, scores=False)     -> (tokens (B,), None)
    pick(logits, scores=True)      -> (tokens (B,), log-probabilities (B,) float32)
    native_pick(rows, scores)      -> `pick` by the C pass, or None where it does not run
"""

from __future__ import annotations

import torch
from torch import Tensor

from .loader import I64, PTR, function, takes

__all__ = ["SIGNATURES", "argmax_rows", "native_pick", "pick"]

CHUNK = 64  # elements per block: measured fastest of 16..128 at B 128..256, V ~4000, 1 and 2 threads


def argmax_rows(logits: Tensor, chunk: int = CHUNK) -> Tensor:
    """First index of the maximum of each row of logits (B, V) -> (B,) int64, in two vectorised passes.

    The row is cut into blocks of `chunk`; `amax` finds each block's maximum, the first block holding
    the row maximum is found on the small (B, V / chunk) table, and the index inside that block on a
    (B, chunk) gather. The first block with the maximum and the first position inside it give the first
    index overall, the tie rule of `logits.max(-1)`; a NaN is the maximum, as there."""
    if logits.dim() != 2:
        raise ValueError(f"argmax_rows expects logits of shape (B, V), got {tuple(logits.shape)}")
    B, V = logits.shape
    if V // chunk < 2 or logits.dtype not in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        return logits.argmax(dim=-1)
    Vm = V - V % chunk  # whole blocks; the remainder (< chunk) is one short block at the end
    block_max = logits[:, :Vm].reshape(B, Vm // chunk, chunk).amax(dim=-1)  # (B, V // chunk)
    if Vm < V:
        block_max = torch.cat([block_max, logits[:, Vm:].amax(dim=-1, keepdim=True)], dim=1)
    first = block_max.argmax(dim=-1, keepdim=True)  # (B, 1) first block holding the maximum
    # Indices of that block; the short last block repeats index V - 1 after its real elements, which
    # cannot come before them in the arg-max (first occurrence).
    idx = (first * chunk + torch.arange(chunk, device=logits.device)).clamp_(max=V - 1)  # (B, chunk)
    inner = logits.gather(1, idx).argmax(dim=-1, keepdim=True)  # (B, 1)
    return idx.gather(1, inner).squeeze(1)


def pick(logits: Tensor, scores: bool = True) -> tuple[Tensor, Tensor | None]:
    """Greedy choice for logits (B, V): tokens (B,) and, if `scores`, their log-probabilities (B,) in
    float32 (logit - logsumexp over the row), else None (skips the exp pass over all B * V logits).

    bf16/fp16 logits are converted to fp32 first (exactly, so the choice is the same): `argmax_rows`'
    block maxima run faster on fp32 than on bf16, cast included (BENCHMARKS.md, "Precision")."""
    rows = logits.float()
    if (picked := native_pick(rows, scores)) is not None:
        return picked
    tokens = argmax_rows(rows)
    if not scores:
        return tokens, None
    return tokens, rows.gather(1, tokens[:, None]).squeeze(1) - torch.logsumexp(rows, dim=-1)


SIGNATURES = {"attnlab_argmax_rows_f32": [PTR, I64, I64, I64, PTR, PTR]}


def native_pick(rows: Tensor, scores: bool) -> tuple[Tensor, Tensor | None] | None:
    """`pick` in one C pass over each row (the same tokens, the log-probability to ~1e-6), or None where it
    does not apply (not fp32 (B, V) rows on the CPU, autograd, no kernel)."""
    if rows.dim() != 2 or rows.shape[1] == 0 or not takes(torch.float32, rows):
        return None
    fn = function("argmax", "attnlab_argmax_rows_f32", SIGNATURES["attnlab_argmax_rows_f32"])
    if fn is None:
        return None
    B, V = rows.shape
    tokens = torch.empty(B, dtype=torch.int64)
    lp = torch.empty(B, dtype=torch.float32) if scores else None
    fn(rows.data_ptr(), B, V, rows.stride(0), tokens.data_ptr(), lp.data_ptr() if lp is not None else None)
    return tokens, lp
