"""Greedy and beam-search decoding over any translator that follows the decoding protocol
(`start_decoding`, `decode_step`, `reorder_state`; see ARCHITECTURE.md).

Both are batched and put the model in eval mode for the duration (no dropout at inference), restoring
its mode afterwards. Both return one `Hypothesis` per source sentence: the tokens (without <bos>/<eos>),
whether the sentence ended with <eos> or was cut at the length limit, its score and the log-probability
of every produced token, so callers never have to guess back what decoding knew.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.beam_trace import trace_path, trace_step
from attnlab.greedy_pick import pick

__all__ = ["Hypothesis", "attention_maps", "beam_search", "greedy", "trace_path"]


@dataclass
class Hypothesis:
    """One decoded sentence.

    tokens: produced target ids, without <bos> and <eos>.
    score: total log-probability / len ** length_penalty, len counting the <eos> when finished.
    finished: True when decoding produced <eos>; False when it stopped at the length limit.
    positional_scores: log-probability of each produced token (len(tokens) + 1 entries when finished:
        the last is the <eos>).
    """

    tokens: list[int]
    score: float
    finished: bool
    positional_scores: list[float] = field(default_factory=list)


@contextmanager
def _inference(model: nn.Module):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _check(src: Tensor, src_valid_lens: Tensor | None, max_len: int | None) -> None:
    if src.dim() != 2:
        raise ValueError(f"src must be token ids of shape (B, S), got {tuple(src.shape)}")
    if src_valid_lens is not None and tuple(src_valid_lens.shape) != (src.shape[0],):
        raise ValueError(f"src_valid_lens must have shape ({src.shape[0]},), got {tuple(src_valid_lens.shape)}")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


def greedy(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor | None,
    bos: int,
    eos: int,
    max_len: int,
    use_cache: bool = True,
    scores: bool = True,
) -> list[Hypothesis]:
    """Pick the most likely token at every step until <eos> or `max_len` tokens.

    Args:
        src: (B, S) source ids; src_valid_lens: (B,) or None.
        eos: a sentence stops at its first <eos>; the loop stops once all have (eos=-1 never stops).
        use_cache: decode one token per step against the model's cache; False re-runs
            `model(src, prefix, src_valid_lens)` on the whole prefix every step (the slow baseline).
        scores: compute each token's log-probability (a logsumexp pass over the (B, V) logits per
            step); False leaves score NaN and positional_scores empty (the tokens are the same).
    Returns:
        B hypotheses; score = mean log-probability per token (<eos> included), as beam search with
        length_penalty=1.
    """
    _check(src, src_valid_lens, max_len)
    if use_cache:
        return _greedy_cached(model, src, src_valid_lens, bos, eos, max_len, scores)
    B = src.shape[0]
    with _inference(model):
        prefix = torch.full((B, 1), bos, dtype=torch.long, device=src.device)  # (B, t)
        step_lp = []  # (B,) log-probability of each chosen token
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        lengths = torch.full((B,), max_len, dtype=torch.long)  # tokens kept per sentence
        for step in range(max_len):
            nxt, lp = pick(model(src, prefix, src_valid_lens)[:, -1], scores)  # (B,), (B,) or None
            prefix = torch.cat([prefix, nxt[:, None]], dim=1)
            if lp is not None:
                step_lp.append(lp)
            new_eos = (nxt == eos) & ~finished
            lengths[new_eos.cpu()] = step
            finished |= new_eos
            if bool(finished.all()):
                break
        rows = prefix[:, 1:].tolist()
        lps = torch.stack(step_lp, dim=1).tolist() if scores else None  # (B, steps)
        ended = finished.tolist()
    return _hypotheses(rows, lps, lengths.tolist(), ended)


def _hypotheses(rows, lps, lengths, ended) -> list[Hypothesis]:
    if lps is None:  # scores not computed
        return [Hypothesis(row[:n], math.nan, done, []) for row, n, done in zip(rows, lengths, ended)]
    hyps = []
    for row, lp, n, done in zip(rows, lps, lengths, ended):
        pos = lp[: n + 1] if done else lp[:n]
        hyps.append(Hypothesis(row[:n], sum(pos) / max(len(pos), 1), done, pos))
    return hyps


def _greedy_cached(
    model: nn.Module, src: Tensor, src_valid_lens: Tensor | None, bos: int, eos: int, max_len: int, scores: bool
) -> list[Hypothesis]:
    """Greedy against the model's cache, with the batch shrinking as sentences end.

    Per step only the n sentences still running are decoded: a sentence that produced <eos> leaves the
    batch (`reorder_state` drops its rows from the encoder memory and every cache), so short sentences
    stop costing anything. Tokens and log-probabilities go into preallocated (B, max_len) tables,
    written at the rows of the running sentences; nothing is copied to Python until the end. The
    choice is `greedy_pick.pick`: arg-max of the logits, log-probability only if `scores`.
    """
    B, device = src.shape[0], src.device
    shrink = hasattr(model, "reorder_state")
    with _inference(model), torch.inference_mode():
        tokens = torch.zeros((B, max_len), dtype=torch.long, device=device)  # (B, max_len)
        lps = torch.zeros((B, max_len), dtype=torch.float, device=device)  # (B, max_len)
        lengths = torch.full((B,), max_len, dtype=torch.long, device=device)  # tokens kept per sentence
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        alive = torch.arange(B, device=device)  # original row of each running sentence, (n,)
        inp = torch.full((B, 1), bos, dtype=torch.long, device=device)  # (n, 1)
        state = model.start_decoding(src, src_valid_lens)
        _reserve(state, max_len)
        steps = 0
        for step in range(max_len):
            logits, state = model.decode_step(inp, state)
            nxt, lp = pick(logits[:, -1], scores)  # (n,), (n,) or None
            steps = step + 1
            if shrink:
                tokens[alive, step] = nxt
                if lp is not None:
                    lps[alive, step] = lp
            else:  # rows never leave: ignore what finished ones produce after their <eos>
                tokens[:, step] = torch.where(finished, tokens[:, step], nxt)
                if lp is not None:
                    lps[:, step] = torch.where(finished, lps[:, step], lp)
            ended = nxt == eos
            if not shrink:
                ended &= ~finished
            if bool(ended.any()):
                done_rows = alive[ended] if shrink else ended.nonzero().squeeze(1)
                lengths[done_rows] = step
                finished[done_rows] = True
                if bool(finished.all()):
                    break
                if shrink:
                    keep = (~ended).nonzero().squeeze(1)  # (n',) positions among the running rows
                    state = model.reorder_state(state, keep)
                    alive, nxt = alive[keep], nxt[keep]
            inp = nxt[:, None]
        rows = tokens[:, :steps].tolist()
        lp_rows = lps[:, :steps].tolist() if scores else None
        out = _hypotheses(rows, lp_rows, lengths.tolist(), finished.tolist())
    return out


def beam_search(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor | None,
    bos: int,
    eos: int,
    beam: int = 4,
    length_penalty: float = 1.0,
    max_len_a: float = 0.0,
    max_len_b: int = 50,
    max_len: int | None = None,
    trace: list | None = None,
) -> list[Hypothesis]:
    """Beam search with length-normalised finished hypotheses (GNMT/fairseq: score / len ** alpha).

    Each step expands every live hypothesis of a sentence and keeps the 2*beam best continuations:
    those ending in <eos> among the top `beam` finish; the best `beam` others stay live. A sentence is
    done once it has `beam` finished hypotheses (so beam=1 is exactly greedy), or at its length limit,
    `max_len` if given, else `max_len_a * source_length + max_len_b`, where its live hypotheses finish
    (with finished=False).

    Work is shaped as fairseq's SequenceGenerator: step 0 runs on the B sources, then the state is
    expanded once to B * beam rows (`_expand`: memory and cross-attention keys/values stay at B rows
    where the model allows); later steps reorder only the growing state (`reorder_state(...,
    same_sources=True)`), and sentences that are done leave the batch.

    Args:
        length_penalty: alpha; 0 ranks by total log-probability (favours short outputs), 1 by per-token
            average. The length counts the <eos> token when there is one.
        trace: a list to append the search itself to (opt-in; None costs nothing). One record per step
            and sentence: {"step", "sentence", "candidates": [...]}; each of the (up to) 2*beam candidates
            considered is {"parent": index of its hypothesis among the previous step's live ones,
            "token", "logprob" (of this token), "score" (total log-probability), "norm_score"
            (score / (step + 1) ** length_penalty), "status": "live" | "finished" | "pruned"}; live
            candidates keep their order, so the next step's parents index them. A hypothesis cut at the
            length limit gets status "cut". Then one {"sentence", "winner": [step, candidate index]}.
    Returns:
        B best hypotheses.
    """
    _check(src, src_valid_lens, max_len)
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    B, K, device = src.shape[0], beam, src.device
    src_lens = src_valid_lens.cpu() if src_valid_lens is not None else torch.full((B,), src.shape[1])
    limits = [max_len if max_len is not None else max(1, int(max_len_a * int(n) + max_len_b)) for n in src_lens]
    # Per sentence: (normalised score, tokens, positional scores, ended with <eos>), in finishing order.
    finished: list[list[tuple[float, list[int], list[float], bool]]] = [[] for _ in range(B)]
    active = list(range(B))  # original index of each sentence still in the batch
    finished_at: dict[int, list[list[int]]] = {}  # trace only: sentence -> [step, candidate] per finished entry
    neg_inf = float("-inf")

    with _inference(model):
        state = model.start_decoding(src, src_valid_lens)
        _reserve(state, max(limits))
        # All K copies start identical: only the first may expand, or the beam fills with duplicates.
        scores = torch.full((B, K), neg_inf, device=device)
        scores[:, 0] = 0.0
        tokens = torch.empty((B * K, 0), dtype=torch.long, device=device)  # history, without <bos>
        pos_lp = torch.empty((B * K, 0), dtype=torch.float, device=device)  # log-prob of each token
        inp = torch.full((B, 1), bos, dtype=torch.long, device=device)  # step 0: one row per source
        for step in range(max(limits)):
            n = len(active)
            logits, state = model.decode_step(inp, state)
            logprobs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (n*K, V), or (B, V) at step 0
            if step == 0:
                logprobs = logprobs.repeat_interleave(K, dim=0)
            V = logprobs.shape[-1]
            cand = (scores.reshape(n * K, 1) + logprobs).reshape(n, K * V)
            top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)  # (n, 2K), sorted best first
            top_beam, top_tok = top_idx // V, top_idx % V
            top_lp = logprobs.reshape(n, K * V).gather(1, top_idx)  # (n, 2K) this token's log-prob

            # Hypotheses ending in <eos> among the top K finish (their length counts the <eos>).
            is_eos = top_tok == eos
            hits = (is_eos[:, :K] & torch.isfinite(top_scores[:, :K])).nonzero().tolist()
            if hits:
                hist, hist_lp = tokens.tolist(), pos_lp.tolist()
                for i, r in hits:
                    fin = finished[active[i]]
                    if len(fin) < K:
                        row = i * K + int(top_beam[i, r])
                        fin.append(
                            (
                                float(top_scores[i, r]) / (step + 1) ** length_penalty,
                                hist[row],
                                hist_lp[row] + [float(top_lp[i, r])],
                                True,
                            )
                        )
                        if trace is not None:
                            finished_at.setdefault(active[i], []).append([step, r])

            # The best K continuations that are not <eos> stay live (there are at least K of 2K).
            live_scores, pick = top_scores.masked_fill(is_eos, neg_inf).topk(K, dim=1)  # (n, K)
            rows = (torch.arange(n, device=device)[:, None] * K + top_beam.gather(1, pick)).reshape(-1)
            new_tok = top_tok.gather(1, pick).reshape(-1)
            tokens = torch.cat([tokens.index_select(0, rows), new_tok[:, None]], dim=1)
            pos_lp = torch.cat([pos_lp.index_select(0, rows), top_lp.gather(1, pick).reshape(-1, 1)], dim=1)
            scores = live_scores
            if trace is not None:
                records = trace_step(
                    trace, step, active, top_scores, top_beam, top_tok, top_lp, pick, finished_at, length_penalty
                )

            keep = []
            for i, b in enumerate(active):
                if len(finished[b]) >= K:
                    continue
                if step + 1 >= limits[b]:  # length limit: the live hypotheses finish as they are
                    hist, hist_lp = tokens[i * K : (i + 1) * K].tolist(), pos_lp[i * K : (i + 1) * K].tolist()
                    for k in range(K):
                        if len(finished[b]) < K and torch.isfinite(scores[i, k]):
                            finished[b].append(
                                (float(scores[i, k]) / (step + 1) ** length_penalty, hist[k], hist_lp[k], False)
                            )
                            if trace is not None:  # this live candidate ends here, cut at the limit
                                r = int(pick[i, k])
                                records[i]["candidates"][r]["status"] = "cut"
                                finished_at.setdefault(b, []).append([step, r])
                    continue
                keep.append(i)
            if not keep:
                break
            if len(keep) < n:  # done sentences leave the batch: every part of the state shrinks
                kept = torch.tensor(keep, device=device)
                sel = (kept[:, None] * K + torch.arange(K, device=device)).reshape(-1)
                rows, tokens = rows.index_select(0, sel), tokens.index_select(0, sel)
                pos_lp = pos_lp.index_select(0, sel)
                new_tok, scores = new_tok.index_select(0, sel), scores.index_select(0, kept)
                active = [active[i] for i in keep]
            if step == 0:  # expand once: K rows per sentence from its single row
                state = _expand(model, state, rows // K, K)
            else:
                state = model.reorder_state(state, rows, same_sources=len(keep) == n)
            inp = new_tok[:, None]

    out = []
    for b, fin in enumerate(finished):
        if not fin:
            out.append(Hypothesis([], neg_inf, False, []))
            continue
        best = max(range(len(fin)), key=lambda j: fin[j][0])
        s, toks, lps, ended = fin[best]
        if trace is not None:
            trace.append({"sentence": b, "winner": finished_at[b][best] if b in finished_at else None})
        out.append(Hypothesis(toks, s, ended, lps))
    return out


def _reserve(state, steps: int) -> None:
    """Tell a state that can size its caches up front (`TransformerState.reserve`) how many steps are coming."""
    reserve = getattr(state, "reserve", None)
    if reserve is not None:
        reserve(steps)


def _expand(model: nn.Module, state, src_rows: Tensor, K: int):
    """Sentence i's K hypotheses start from its row (src_rows (n*K,)): `expand_beams` where the model has
    it (memory and cross-attention keys/values stay one row per sentence), else `reorder_state`."""
    expand = getattr(model, "expand_beams", None)
    return expand(state, src_rows[::K], K) if expand is not None else model.reorder_state(state, src_rows)


def attention_maps(rec) -> dict[str, Tensor]:
    """Stitch a recording of step-by-step decoding into one (B, H, Lq, Lk) tensor per module.

    Cached decoding records one call per step: cross-attention (B, H, 1, S) each, self-attention
    (B, H, 1, t) with t growing. Calls are concatenated along the query axis; shorter key axes are padded
    with zeros on the right (a step cannot see the future, so those weights are exactly zero anyway).
    """
    maps = {}
    for name, calls in rec.weights.items():
        Lk = max(w.shape[-1] for w in calls)
        maps[name] = torch.cat([F.pad(w, (0, Lk - w.shape[-1])) for w in calls], dim=2)
    return maps
