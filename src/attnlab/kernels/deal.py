"""Constrained beam search's dealing (`csrc/deal.c`, and its PyTorch fallback): from each sentence's candidates
and its hypotheses' progress through the phrases, the 2K dealt round-robin over the banks (Post & Vilar's dynamic
beam allocation, fairseq's stripes), with the progress each makes.

    scores, tokens, beams, lprobs, progress = deal(candidates, st, table, eos, k2, fresh)   # 5 x (n, k2)
    native_deal(...)  -> the same by the C pass, or None where it does not run

What a step of `attnlab.decoding.constraints.ConstrainedBeamSearch` does after finding its candidates; the
C pass does per sentence what the fallback's forty small operators do over the batch, the same result.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .loader import I64, PTR, function, takes

__all__ = ["SIGNATURES", "PhraseRows", "deal", "native_deal"]

SIGNATURES = {"attnlab_deal": [*[I64] * 3, *[PTR] * 7, I64, PTR, PTR, I64, I64, PTR, I64, *[PTR] * 5]}


class PhraseRows(NamedTuple):
    """What the dealing reads of a phrase table, per progress id (S of them): tokens (S, T) its unit's phrase
    tokens (-2: none), nxt (S, T) the id after each, reset (S,) the id after any other token, bank (S,) the
    constraint tokens it has produced."""

    tokens: Tensor
    nxt: Tensor
    reset: Tensor
    bank: Tensor


def deal(
    candidates: tuple[Tensor, Tensor, Tensor, Tensor], st: Tensor, rows: PhraseRows, eos: int, k2: int, fresh: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Deal k2 places among each sentence's candidates.

    Shape: candidates (scores, beams, tokens, log-probabilities) (n, C) (-inf: none; a (beam, token) met twice
    keeps its first place), st (n, K) each hypothesis' progress id, fresh (n,) the progress of a filler ->
    scores, tokens, beams, log-probabilities, progress ids (n, k2): the valid candidates ranked by score
    (ties: the earlier place), dealt by (rank within their bank, fuller bank first), then fillers (-inf,
    `eos`, beam 0, 0, fresh). An <eos> keeps its hypothesis' progress.

    Examples:
        >>> rows = PhraseRows(torch.tensor([[9], [-2]]), torch.tensor([[1], [0]]), torch.tensor([0, 1]),
        ...                   torch.tensor([0, 1]))                 # progress 0 --9--> 1 (one phrase: "9")
        >>> cands = (torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[0, 0, 0]]), torch.tensor([[7, 8, 9]]),
        ...          torch.tensor([[-1.0, -2.0, -3.0]]))
        >>> s, t, b, lp, p = deal(cands, torch.tensor([[0]]), rows, 2, 2, torch.tensor([0]))
        >>> t.tolist(), p.tolist()   # the phrase token's bank first, then the best of the other
        ([[9, 7]], [[1, 0]])
    """
    if (found := native_deal(candidates, st, rows, eos, k2, fresh)) is not None:
        return found
    cs, cb, ct, clp = candidates
    n, C = cs.shape
    neg_inf = float("-inf")
    keys, order = (cb * (int(ct.max()) + 2) + ct + 1).sort(dim=1, stable=True)  # (beam, token); a token may be -1
    again = torch.zeros_like(keys, dtype=torch.bool).scatter_(1, order[:, 1:], keys[:, 1:] == keys[:, :-1])
    rs, ri = cs.masked_fill(again, neg_inf).sort(dim=1, descending=True, stable=True)  # ranked
    rb, rt, rlp = cb.gather(1, ri), ct.gather(1, ri), clp.gather(1, ri)
    valid, is_eos = rs > neg_inf, rt == eos
    now = st.gather(1, rb)  # (n, C) the progress each candidate extends, then the progress it makes
    flat = now.view(-1)
    hit = rows.tokens.index_select(0, flat).view(n, C, -1) == rt[:, :, None]  # (n, C, T): one hit at most
    reset = rows.reset.take(now)
    nxt = (hit * (rows.nxt.index_select(0, flat).view(n, C, -1) - reset[:, :, None])).sum(-1) + reset
    after = torch.where(is_eos, now, nxt)
    bank = rows.bank.take(after)
    nb = int(bank.max()) + 1
    rank = (F.one_hot(bank, nb) * valid[:, :, None]).cumsum(dim=1).gather(2, bank[:, :, None]).squeeze(2) - 1
    never = torch.iinfo(torch.long).max
    dealt = torch.where(valid, rank * nb + (nb - 1 - bank), never).topk(k2, dim=1, largest=False)
    take, kept = dealt.indices, dealt.values < never  # (n, k2) in dealt order
    scores = rs.gather(1, take).masked_fill(~kept, neg_inf)
    tokens = rt.gather(1, take).masked_fill(~kept, eos)
    beams = rb.gather(1, take).masked_fill(~kept, 0)
    progress = torch.where(kept, after.gather(1, take), fresh[:, None])
    return scores, tokens, beams, rlp.gather(1, take).masked_fill(~kept, 0.0), progress


def native_deal(
    candidates: tuple[Tensor, Tensor, Tensor, Tensor], st: Tensor, rows: PhraseRows, eos: int, k2: int, fresh: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor] | None:
    """`deal` in one C call, or None where it does not run (not CPU tensors of float32 scores and int64 ids,
    contiguous; autograd; no kernel here)."""
    cs, cb, ct, clp = candidates
    ids = (cb, ct, st, rows.tokens, rows.nxt, rows.reset, rows.bank, fresh)
    if not (takes(torch.float32, cs, clp) and takes(torch.int64, *ids)):
        return None
    if not all(t.is_contiguous() for t in (cs, clp, *ids)):
        return None
    fn = function("deal", "attnlab_deal", SIGNATURES["attnlab_deal"], ctypes.c_int)
    if fn is None:
        return None
    n, C = cs.shape
    K, (S, T) = st.shape[1], rows.tokens.shape
    os_, olp = torch.empty((n, k2)), torch.empty((n, k2))
    ot, ob, op = (torch.empty((n, k2), dtype=torch.int64) for _ in range(3))
    status = fn(
        n, K, C, cs.data_ptr(), cb.data_ptr(), ct.data_ptr(), clp.data_ptr(), st.data_ptr(),
        rows.tokens.data_ptr(), rows.nxt.data_ptr(), T, rows.reset.data_ptr(), rows.bank.data_ptr(), S, eos,
        fresh.data_ptr(), k2, os_.data_ptr(), ot.data_ptr(), ob.data_ptr(), olp.data_ptr(), op.data_ptr(),
    )  # fmt: skip
    return (os_, ot, ob, olp, op) if status == 0 else None
