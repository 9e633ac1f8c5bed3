"""Greedy decoding: at each step the most likely token, batched, against the model's cache, with
finished sentences leaving the batch (or, `use_cache=False`, a full forward per step as a reference).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.protocol import check_source, inference, reserve_steps
from attnlab.kernels.argmax import pick

# Finished rows leave the batch once they are at least this fraction of it (see `_greedy_cached`).
COMPACT_FRACTION = 0.25


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
    check_source(src, src_valid_lens, max_len)
    if use_cache:
        return _greedy_cached(model, src, src_valid_lens, bos, eos, max_len, scores)
    B = src.shape[0]
    with inference(model):
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

    Per step only the sentences still in the batch are decoded. A sentence that produced <eos> is
    finished at once (its length recorded), but its row leaves the batch (`reorder_state` drops it from
    the encoder memory and every cache) only once at least `COMPACT_FRACTION` of the rows are finished:
    dropping rows copies every cache, so doing it at every step where some sentence ends cost more
    than decoding a few finished rows a little longer (what they produce past their <eos> is never
    read). Tokens and log-probabilities go into preallocated (B, max_len) tables, written at the rows
    of the batch; nothing is copied to Python until the end. The choice is `argmax.pick`: arg-max of
    the logits, log-probability only if `scores`.
    """
    B, device = src.shape[0], src.device
    shrink = hasattr(model, "reorder_state")
    with inference(model), torch.inference_mode():
        tokens = torch.zeros((B, max_len), dtype=torch.long, device=device)  # (B, max_len)
        lps = torch.zeros((B, max_len), dtype=torch.float, device=device)  # (B, max_len)
        # Tokens kept per sentence: max_len until its <eos> (at step < max_len), so finished = lengths < max_len.
        lengths = torch.full((B,), max_len, dtype=torch.long, device=device)
        rows = torch.arange(B, device=device)  # original sentence of each batch row, (n,)
        done = torch.zeros(B, dtype=torch.bool, device=device)  # (n,) batch rows already finished
        inp = torch.full((B, 1), bos, dtype=torch.long, device=device)  # (n, 1)
        state = model.start_decoding(src, src_valid_lens)
        reserve_steps(state, max_len)
        steps, dead = 0, 0
        for step in range(max_len):
            logits, state = model.decode_step(inp, state)
            nxt, lp = pick(logits[:, -1], scores)  # (n,), (n,) or None
            steps = step + 1
            # A finished row's token lands past its length (never read), so every row is written as is.
            tokens[rows, step] = nxt
            if lp is not None:
                lps[rows, step] = lp
            ended = nxt == eos
            if dead:  # rows already finished may say <eos> again
                ended &= ~done
            n_ended = int(ended.sum())  # one read of the step's result
            if n_ended:
                lengths[rows[ended]] = step
                done |= ended
                dead += n_ended
                if dead == done.numel():
                    break
                if shrink and dead >= COMPACT_FRACTION * done.numel():
                    keep = (~done).nonzero().squeeze(1)  # (n',) positions among the batch rows
                    state = model.reorder_state(state, keep)
                    rows, nxt, done, dead = rows[keep], nxt[keep], done[keep], 0
            inp = nxt[:, None]
        token_rows = tokens[:, :steps].tolist()
        lp_rows = lps[:, :steps].tolist() if scores else None
        out = _hypotheses(token_rows, lp_rows, lengths.tolist(), (lengths < max_len).tolist())
    return out
