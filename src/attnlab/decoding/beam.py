"""Beam search over the decoding protocol (`attnlab.decoding.protocol`): the loop around `beam_step`,
the finalisation of hypotheses (at <eos>, or at the length limit), and the batch shrinking as
sentences are done, shaped as fairseq's SequenceGenerator. `beam_search` returns one `Hypothesis` per
sentence, `nbest_search` the n best of each.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.decoding.controls import Controls
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.protocol import check_source, expand_state, inference, reserve_steps
from attnlab.decoding.search import beam_step
from attnlab.decoding.trace import trace_step


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
    *,
    controls: Controls | None = None,
    prefix: Tensor | None = None,
) -> list[Hypothesis]:
    """Beam search with length-normalised finished hypotheses (GNMT/fairseq: score / len ** alpha).

    Each step expands every live hypothesis of a sentence and keeps the 2*beam best continuations:
    those ending in <eos> among the top `beam` finish; the best `beam` others stay live. A sentence is
    done once it has `beam` finished hypotheses (so beam=1 is exactly greedy), or at its length limit,
    `max_len` if given, else `max_len_a * source_length + max_len_b`, where its live hypotheses finish
    (with finished=False).

    Work is shaped as fairseq's SequenceGenerator: step 0 runs on the B sources, then the state is
    expanded once to B * beam rows (`expand_state`: memory and cross-attention keys/values stay at B rows
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
        controls: length and repetition controls (`attnlab.decoding.controls.Controls`) or None.
        prefix: (B, P) target ids every hypothesis starts with (fed in one decoding step after <bos>);
            the hypotheses' tokens and positional scores include them, their score and its length
            count only the tokens after them (as `transformers`' generate with decoder_input_ids), and
            the length limit counts the steps after them.
    Returns:
        B best hypotheses.
    """
    finished, finished_at = _search(
        model, src, src_valid_lens, bos, eos, beam, length_penalty, max_len_a, max_len_b, max_len, trace, controls,
        prefix, replace=False,
    )  # fmt: skip
    return _winners(finished, trace, finished_at)


def nbest_search(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor | None,
    bos: int,
    eos: int,
    beam: int,
    n_best: int,
    length_penalty: float = 1.0,
    max_len: int = 50,
    *,
    controls: Controls | None = None,
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """`beam_search` returning each sentence's `n_best` (<= beam) distinct finished hypotheses, best
    first (ties in finishing order): the n-best list of `transformers`' generate(num_beams=beam,
    num_return_sequences=n_best, early_stopping=True)."""
    if not 1 <= n_best <= beam:
        raise ValueError(f"n_best must be between 1 and the beam ({beam}), got {n_best}")
    finished, _ = _search(
        model,
        src,
        src_valid_lens,
        bos,
        eos,
        beam,
        length_penalty,
        0.0,
        0,
        max_len,
        None,
        controls,
        prefix,
        replace=True,
    )
    return [[Hypothesis(t, s, e, lp) for s, t, lp, e in ranked(fin)[:n_best]] for fin in finished]


def ranked(fin: list[Finished]) -> list[Finished]:
    """A sentence's finished hypotheses, best normalised score first (a stable sort: ties keep finishing order)."""
    return sorted(fin, key=lambda f: -f[0])


def _search(
    model,
    src,
    src_valid_lens,
    bos,
    eos,
    beam,
    length_penalty,
    max_len_a,
    max_len_b,
    max_len,
    trace,
    controls,
    prefix,
    replace: bool,
) -> tuple[list[list[Finished]], dict]:
    """The search itself: every sentence's finished hypotheses, and (trace only) where each finished.
    replace: see `finalize` (the n-best list; the 1-best is the same either way unless the limit cuts)."""
    check_source(src, src_valid_lens, max_len)
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    B, K, device = src.shape[0], beam, src.device
    src_lens = src_valid_lens.cpu() if src_valid_lens is not None else torch.full((B,), src.shape[1])
    limits = [max_len if max_len is not None else max(1, int(max_len_a * int(n) + max_len_b)) for n in src_lens]
    # Per sentence: (normalised score, tokens, positional scores, ended with <eos>), in finishing order.
    finished: list[list[Finished]] = [[] for _ in range(B)]
    active = list(range(B))  # original index of each sentence still in the batch
    finished_at: dict[int, list[list[int]]] = {}  # trace only: sentence -> [step, candidate] per finished entry
    neg_inf = float("-inf")

    P = 0 if prefix is None else prefix.shape[1]
    with inference(model):
        state = model.start_decoding(src, src_valid_lens)
        reserve_steps(state, max(limits) + P)
        # All K copies start identical: only the first may expand, or the beam fills with duplicates.
        scores = torch.full((B, K), neg_inf, device=device)
        scores[:, 0] = 0.0
        tokens = torch.empty((B * K, 0), dtype=torch.long, device=device)  # history, without <bos>
        pos_lp = torch.empty((B * K, 0), dtype=torch.float, device=device)  # log-prob of each token
        inp = torch.full((B, 1), bos, dtype=torch.long, device=device)  # step 0: one row per source
        if prefix is not None:  # step 0 feeds <bos> + prefix: (B, 1 + P)
            inp = torch.cat([inp, prefix.to(device)], dim=1)
        for step in range(max(limits)):
            n = len(active)
            logits, state = model.decode_step(inp, state)
            logprobs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (n*K, V), or (B, V) at step 0
            if step == 0:
                logprobs = logprobs.repeat_interleave(K, dim=0)
                if P:
                    tokens, pos_lp = prefix_history(logits, inp, K)
            if controls is not None:
                logprobs = controls(logprobs, tokens)
            V = logprobs.shape[-1]
            top_scores, top_tok, top_beam = beam_step(logprobs.reshape(n, K, V), scores)  # (n, 2K) each
            top_lp = logprobs.reshape(n, K * V).gather(1, top_beam * V + top_tok)  # (n, 2K) this token's log-prob

            # Hypotheses ending in <eos> among the top K finish (their length counts the <eos>).
            is_eos = top_tok == eos
            hits = (is_eos[:, :K] & torch.isfinite(top_scores[:, :K])).nonzero().tolist()
            if hits:
                norm = (step + 1) ** length_penalty
                hist, hist_lp = tokens.tolist(), pos_lp.tolist()
                for i, r in hits:
                    row = i * K + int(top_beam[i, r])
                    entry = (float(top_scores[i, r]) / norm, hist[row], hist_lp[row] + [float(top_lp[i, r])], True)
                    if finalize(finished[active[i]], entry, K, replace) and trace is not None:
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
                    norm = (step + 1) ** length_penalty
                    hist, hist_lp = tokens[i * K : (i + 1) * K].tolist(), pos_lp[i * K : (i + 1) * K].tolist()
                    for k in range(K):
                        if not torch.isfinite(scores[i, k]):
                            continue
                        entry = (float(scores[i, k]) / norm, hist[k], hist_lp[k], False)
                        if finalize(finished[b], entry, K, replace) and trace is not None:  # cut at the limit
                            r = int(pick[i, k])
                            records[i]["candidates"][r]["status"] = "cut"
                            finished_at.setdefault(b, []).append([step, r])
                    continue
                keep.append(i)
            if not keep:
                break
            if len(keep) < n:  # done sentences leave the batch: every part of the state shrinks
                rows, tokens, pos_lp, new_tok, scores = shrink_batch(keep, K, rows, tokens, pos_lp, new_tok, scores)
                active = [active[i] for i in keep]
            if step == 0:  # expand once: K rows per sentence from its single row
                state = expand_state(model, state, rows // K, K)
            else:
                state = model.reorder_state(state, rows, same_sources=len(keep) == n)
            inp = new_tok[:, None]

    return finished, finished_at


def prefix_history(logits: Tensor, inp: Tensor, K: int) -> tuple[Tensor, Tensor]:
    """The prefix as every hypothesis' history: tokens (B*K, P) and their log-probabilities (B*K, P),
    from step 0's logits (B, 1 + P, V) over its inputs inp (B, 1 + P) = <bos> + prefix."""
    prefix = inp[:, 1:]
    lp = F.log_softmax(logits[:, :-1].float(), dim=-1).gather(2, prefix[:, :, None]).squeeze(2)  # (B, P)
    return prefix.repeat_interleave(K, dim=0), lp.repeat_interleave(K, dim=0)


# A finished hypothesis: (normalised score, tokens, positional scores, ended with <eos>).
Finished = tuple[float, list[int], list[float], bool]


def finalize(fin: list[Finished], entry: Finished, K: int, replace: bool = False) -> bool:
    """Add a finished hypothesis to its sentence's list unless it already holds K; says whether it did.

    replace: a full list trades its worst entry for a better one instead (a sentence fills at one
    step, so this keeps the K best of everything that finished by then: `transformers`' n-best rule).
    """
    if len(fin) < K:
        fin.append(entry)
        return True
    if replace:
        worst = min(range(len(fin)), key=lambda j: fin[j][0])
        if entry[0] > fin[worst][0]:
            fin[worst] = entry
            return True
    return False


def shrink_batch(keep: list[int], K: int, *per_row: Tensor) -> tuple[Tensor, ...]:
    """Keep only the sentences at positions `keep` (of n): each tensor of n*K rows keeps their K rows
    each, and the last, `scores` (n, K), their rows."""
    kept = torch.tensor(keep, device=per_row[0].device)
    sel = (kept[:, None] * K + torch.arange(K, device=kept.device)).reshape(-1)  # (len(keep)*K,)
    *rows, scores = per_row
    return (*(t.index_select(0, sel) for t in rows), scores.index_select(0, kept))


def _winners(finished: list[list[Finished]], trace: list | None, finished_at: dict) -> list[Hypothesis]:
    """Each sentence's best finished hypothesis (an empty one, score -inf, if none finished)."""
    out = []
    for b, fin in enumerate(finished):
        if not fin:
            out.append(Hypothesis([], float("-inf"), False, []))
            continue
        best = max(range(len(fin)), key=lambda j: fin[j][0])
        s, toks, lps, ended = fin[best]
        if trace is not None:
            trace.append({"sentence": b, "winner": finished_at[b][best] if b in finished_at else None})
        out.append(Hypothesis(toks, s, ended, lps))
    return out
