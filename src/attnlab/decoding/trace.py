"""The beam search's own record (opt-in `DecodeOptions(trace=True)`, on each sentence's best `Hypothesis.trace`):
every candidate of every step, whether it stayed live, was pruned or finished, and the path of each sentence's
winner. The explorer draws it.

A step record: {"step", "sentence", "candidates": [{"parent", "token", "logprob", "score", "norm_score",
"status": live|pruned|finished|impossible, "slot"}]}; a final record: {"sentence", "winner": [step, index]}.
"""

from __future__ import annotations

import math

from torch import Tensor

from attnlab.decoding.search import Candidates

__all__ = ["trace_path", "trace_step"]


def trace_step(
    trace: list, step: int, active: list[int], cands: Candidates, live: Tensor, *, accepted: set, norm: float
) -> list[dict]:
    """Append one record per active sentence for this step: its candidates (n, 2K) and the positions kept
    live (n, K); `accepted`: the (row, position) of the <eos> candidates that finished; norm: the length
    penalty's divisor. Returns the records."""
    sc, par, tok, lp = (cands.scores.tolist(), cands.beams.tolist(), cands.tokens.tolist(), cands.lprobs.tolist())
    records = []
    for i, (b, kept) in enumerate(zip(active, live.tolist())):
        slot = {r: k for k, r in enumerate(kept)}
        cs = []
        for r in range(len(sc[i])):
            ok = math.isfinite(sc[i][r])  # False: fewer than 2*beam real continuations (tiny vocabularies)
            status = "impossible" if not ok else "finished" if (i, r) in accepted else "live" if r in slot else "pruned"
            cs.append(
                {
                    "parent": par[i][r],
                    "token": tok[i][r],
                    "logprob": lp[i][r] if ok else None,
                    "score": sc[i][r] if ok else None,
                    "norm_score": sc[i][r] / norm if ok else None,
                    "status": status,
                    "slot": slot.get(r) if ok else None,
                }
            )
        rec = {"step": step, "sentence": b, "candidates": cs}
        trace.append(rec)
        records.append(rec)
    return records


def trace_path(trace: list, sentence: int = 0) -> list[tuple[int, int]]:
    """The (step, candidate index) of every token of `sentence`'s winning hypothesis in a beam trace,
    first step first (follows the parents back from the winner). Empty when nothing finished."""
    steps = {r["step"]: r for r in trace if r.get("sentence") == sentence and "step" in r}
    win = next((r["winner"] for r in trace if r.get("sentence") == sentence and "winner" in r), None)
    if win is None:
        return []
    path, (step, idx) = [], win
    while True:
        path.append((step, idx))
        if step == 0:
            break
        parent = steps[step]["candidates"][idx]["parent"]
        idx = next(j for j, c in enumerate(steps[step - 1]["candidates"]) if c["slot"] == parent)
        step -= 1
    return path[::-1]
