"""Beam search's selection in one C pass (`csrc/beam_topk.c`): the log-softmax of each hypothesis' logits, its
score added, and each sentence's best 2K of K * V candidates, with PyTorch's ops where the pass does not run.

    scores, tokens, beams, token_lp = beam_candidates(logits (n*K, V), scores (n, K), 2 * K)   # 4 x (n, 2K)
    native_beam_candidates(...)  -> the same by the C pass, or None where it does not run
    top_logits(logits (n, V), k)  -> each row's k largest logits and their tokens (sampling's top-k), best first
    (cands, rows) = constrained_candidates(logits, scores, 2 * K, ban (n*K,))   # a banned token per row; each
                                                 # row's own best token, its log-probability, its log-sum-exp

The same contract as `attnlab.decoding.search.beam_step` over `log_softmax(logits)`, without the (n*K, V)
log-probabilities in memory: each row's maximum and exponential sum, then its candidates compared against the
running k-th best. The C pass's log-probabilities may differ from PyTorch's in the last bits (its own
exponential); ties go to the lower candidate index (beam, then token).
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F
from torch import Tensor

from . import loader as native

__all__ = ["SIGNATURES", "beam_candidates", "constrained_candidates", "native_beam_candidates", "top_logits"]

SIGNATURES = {
    "attnlab_beam_topk": [
        native.PTR, *[native.I64] * 4, native.PTR, native.I64, *[native.PTR] * 4, native.I64, *[native.PTR] * 4
    ]
}  # fmt: skip
_MAX_K = 64  # the C pass keeps each sentence's best list in registers' reach


def beam_candidates(logits: Tensor, scores: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The best k continuations of each sentence's K live hypotheses, best first.

    Shape: logits (n*K, V) (rows i*K .. i*K + K-1 are sentence i's hypotheses), scores (n, K) (-inf: an unused
    hypothesis) -> scores (n, k), tokens (n, k), beams (n, k) (0..K-1), token log-probabilities (n, k).

    Examples:
        >>> logits = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]]))   # n=1, K=2, V=3
        >>> s, t, b, lp = beam_candidates(logits, torch.tensor([[0.0, float("-inf")]]), 3)
        >>> t.tolist(), b.tolist()   # beam 1 is unused: the finite candidates extend beam 0
        ([[0, 1, 2]], [[0, 0, 0]])
    """
    n, K = scores.shape
    V = logits.shape[-1]
    if not 1 <= k <= K * V:
        raise ValueError(f"k must lie in [1, K * V = {K * V}], got {k}")
    if (found := native_beam_candidates(logits, scores, k)) is not None:
        return found[0], found[1], found[2], found[3]
    lprobs = F.log_softmax(logits.float(), dim=-1).reshape(n, K * V)
    cand_scores, idx = (scores.unsqueeze(-1) + lprobs.view(n, K, V)).reshape(n, K * V).topk(k, dim=1)
    return cand_scores, idx % V, idx // V, lprobs.gather(1, idx)


def top_logits(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Each row's k largest logits and their tokens, best first (ties: the lower token first), as
    `logits.topk(k)`: the C pass of `beam_candidates` without its log-softmax (sampling's top-k draws from
    softmax over these k, which no row shift changes).

    Shape: logits (n, V) -> values (n, k), tokens (n, k) int64.

    Examples:
        >>> values, tokens = top_logits(torch.tensor([[0.5, 3.0, -1.0, 2.0]]), 2)
        >>> values.tolist(), tokens.tolist()
        ([[3.0, 2.0]], [[1, 3]])
    """
    n, V = logits.shape
    if not 1 <= k <= V:
        raise ValueError(f"k must lie in [1, V = {V}], got {k}")
    if (found := native_beam_candidates(logits, torch.zeros((n, 1)), k, raw=True)) is not None:
        return found[3], found[1]
    return logits.float().topk(k, dim=1)


def constrained_candidates(
    logits: Tensor, scores: Tensor, k: int, ban: Tensor
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]:
    """`beam_candidates` where row r's token ban[r] (-1: none) is never a candidate though it keeps its share of
    the log-softmax (a ban sets a token to -inf and leaves the others as they are), with each row's own best:
    what constrained beam search reads (the 2K best, each hypothesis' best, the log-probability of any token).

    Shape: logits (n*K, V), scores (n, K), ban (n*K,) int64 -> (scores, tokens, beams, token log-probabilities)
    (n, k) as `beam_candidates`, and (best token, its log-probability, log-sum-exp) (n*K,) per row (a row with
    no candidate: token 0, -inf).

    Examples:
        >>> logits = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]]))   # n=1, K=2, V=3
        >>> ban = torch.tensor([0, -1])                                             # row 0 may not say 0
        >>> (s, t, b, lp), (best, best_lp, lse) = constrained_candidates(logits, torch.zeros(1, 2), 2, ban)
        >>> t.tolist(), b.tolist(), best.tolist()   # 0.5 and 0.4 of row 1 beat row 0's 0.3
        ([[0, 1]], [[1, 1]], [1, 0])
        >>> [round(x, 4) for x in best_lp.tolist()], [round(x, 4) for x in lse.tolist()]
        ([-1.204, -0.6931], [0.0, 0.0])
    """
    n, K = scores.shape
    V = logits.shape[-1]
    if not 1 <= k <= K * V:
        raise ValueError(f"k must lie in [1, K * V = {K * V}], got {k}")
    if (found := native_beam_candidates(logits, scores, k, ban=ban)) is not None:
        cs, ct, cb, clp, best, best_lp, lse = found
        return (cs, ct, cb, clp), (best, best_lp, lse)
    x = logits.float()
    lse = x.logsumexp(dim=-1)  # (n*K,)
    lprobs = (x - lse[:, None]).nan_to_num(nan=float("-inf"), posinf=float("inf"))  # NaN: no candidate, as the C pass
    rows = (ban >= 0).nonzero().squeeze(1)
    lprobs[rows, ban[rows]] = float("-inf")
    best_lp, best = lprobs.max(dim=-1)
    cand_scores, idx = (scores.unsqueeze(-1) + lprobs.view(n, K, V)).reshape(n, K * V).topk(k, dim=1)
    cands = (cand_scores, idx % V, idx // V, lprobs.view(n, K * V).gather(1, idx))
    return cands, (best.masked_fill(best_lp == float("-inf"), 0), best_lp, lse)


def native_beam_candidates(
    logits: Tensor, scores: Tensor, k: int, raw: bool = False, ban: Tensor | None = None
) -> tuple[Tensor, ...] | None:
    """`beam_candidates` in the C pass, or None where it does not run (k over 64, not fp32 on the CPU, autograd,
    logits that are not (n*K, V) rows, scores not contiguous, no kernel here). With `raw`, the logits stand for
    their log-probabilities (`top_logits`; K = 1). With `ban` (n*K,) int64, `constrained_candidates`' seven."""
    n, K = scores.shape
    V = logits.shape[-1]
    if not (
        k <= _MAX_K
        and logits.dim() == 2
        and logits.shape[0] == n * K
        and scores.is_contiguous()
        and native.takes(torch.float32, logits, scores)
    ):
        return None
    fn = native.function("beam_topk", "attnlab_beam_topk", SIGNATURES["attnlab_beam_topk"], ctypes.c_int)
    if fn is None:
        return None
    cs, clp = torch.empty((n, k)), torch.empty((n, k))
    ct, cb = torch.empty((n, k), dtype=torch.int64), torch.empty((n, k), dtype=torch.int64)
    rows: tuple[Tensor, ...] = ()
    if ban is not None:
        if not (ban.dtype == torch.int64 and ban.device.type == "cpu" and ban.shape == (n * K,)):
            return None
        ban = ban.contiguous()
        rows = (torch.empty(n * K, dtype=torch.int64), torch.empty(n * K), torch.empty(n * K))
    status = fn(
        logits.data_ptr(), logits.stride(0), n, K, V, scores.data_ptr(), k,
        cs.data_ptr(), ct.data_ptr(), cb.data_ptr(), clp.data_ptr(), int(raw),
        *(t.data_ptr() for t in (ban, *rows)) if ban is not None else (None,) * 4,
    )  # fmt: skip
    return (cs, ct, cb, clp, *rows) if status == 0 else None
