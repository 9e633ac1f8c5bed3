"""Sampling (and greedy with controls or a prefix): every row picks its own next token, against the model's
cache, with rows that produced <eos> leaving the batch.

    hyps = sample(model, src, lens, bos, eos, max_len=50, n=4, top_p=0.9, generator=g)   # B lists of 4

Per step: log_softmax of the logits -> the controls' bans (min_len, no-repeat n-grams) -> divide by the
temperature -> keep the top-k, then the nucleus (top-p) -> draw from the softmax of what is left (the
order of `transformers`' logits processors and warpers). `greedy=True` takes the arg-max instead (what
`Translator` uses for beam 1 with controls or a prefix). A hypothesis' positional scores and score are
the model's own log-probabilities (after the controls' bans, before temperature and filtering).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.decoding.beam import prefix_history
from attnlab.decoding.controls import Controls
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.protocol import check_source, expand_state, inference, reserve_steps

__all__ = ["filter_scores", "sample"]


def filter_scores(scores: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """scores (R, V) with the tokens outside the top-k (ties kept) and then outside the nucleus set to
    -inf: the smallest set of likeliest tokens whose probability reaches top_p (always at least one),
    as `transformers`' TopKLogitsWarper and TopPLogitsWarper. 0 and 1.0 switch each filter off.

    Examples:
        >>> s = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
        >>> torch.isfinite(filter_scores(s, top_k=3)).tolist(), torch.isfinite(filter_scores(s, top_p=0.8)).tolist()
        ([[True, True, True, False]], [[True, True, False, False]])
    """
    if top_k > 0 and top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (R, 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, idx = scores.sort(dim=-1)  # ascending
        drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
        drop[:, -1] = False  # the likeliest token always stays
        scores = scores.masked_fill(drop.scatter(1, idx, drop), float("-inf"))
    return scores


def sample(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor | None,
    bos: int,
    eos: int,
    max_len: int,
    *,
    n: int = 1,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    length_penalty: float = 1.0,
    controls: Controls | None = None,
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """`n` samples per source (B lists of n hypotheses, best score first), or with greedy=True the arg-max.

    Args:
        src: (B, S) source ids; src_valid_lens: (B,) or None.
        max_len: most steps after the prefix (<eos> included).
        generator: the random stream (a seeded torch.Generator makes the samples reproducible).
        length_penalty: score = sum of log-probabilities / length ** length_penalty (length counting
            the <eos>, not the prefix).
        controls: min_len and no-repeat n-gram bans, or None.
        prefix: (B, P) target ids each output starts with (fed after <bos> in one step).
    """
    check_source(src, src_valid_lens, max_len)
    B, device = src.shape[0], src.device
    P = 0 if prefix is None else prefix.shape[1]
    R = B * n  # rows: n per source, source i's at i*n .. i*n + n-1
    with inference(model):
        tokens = torch.zeros((R, P + max_len), dtype=torch.long, device=device)  # (R, P + max_len)
        lps = torch.zeros((R, P + max_len), dtype=torch.float, device=device)
        lengths = torch.full((R,), max_len, dtype=torch.long, device=device)  # generated tokens kept
        finished = torch.zeros(R, dtype=torch.bool, device=device)
        alive = torch.arange(R, device=device)  # (r,) original row of each running row
        inp = torch.full((B, 1), bos, dtype=torch.long, device=device)
        if prefix is not None:
            inp = torch.cat([inp, prefix.to(device)], dim=1)  # (B, 1 + P)
        state = model.start_decoding(src, src_valid_lens)
        reserve_steps(state, max_len + P)
        steps = 0
        for step in range(max_len):
            logits, state = model.decode_step(inp, state)
            lp = F.log_softmax(logits[:, -1].float(), dim=-1)  # (r, V), (B, V) at step 0
            if step == 0:
                lp = lp.repeat_interleave(n, dim=0)
                if P:
                    tokens[:, :P], lps[:, :P] = prefix_history(logits, inp, n)
                state = expand_state(model, state, torch.arange(R, device=device) // n, n)
            if controls is not None:
                lp = controls(lp, tokens[alive, : P + step])
            if greedy:
                nxt = lp.argmax(dim=-1)
            else:
                probs = filter_scores(lp / temperature, top_k, top_p).softmax(dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (r,)
            tokens[alive, P + step] = nxt
            lps[alive, P + step] = lp.gather(1, nxt[:, None]).squeeze(1)
            steps = step + 1
            ended = nxt == eos
            if bool(ended.any()):
                lengths[alive[ended]] = step
                finished[alive[ended]] = True
                if bool(finished.all()):
                    break
                keep = (~ended).nonzero().squeeze(1)  # (r',) positions among the running rows
                state = model.reorder_state(state, keep)
                alive, nxt = alive[keep], nxt[keep]
            inp = nxt[:, None]
        rows, lp_rows = tokens[:, : P + steps].tolist(), lps[:, : P + steps].tolist()
        out = _hypotheses(rows, lp_rows, lengths.tolist(), finished.tolist(), P, length_penalty)
    return [sorted(out[i * n : (i + 1) * n], key=lambda h: -h.score) for i in range(B)]


def _hypotheses(rows, lp_rows, lengths, ended, P: int, length_penalty: float) -> list[Hypothesis]:
    hyps = []
    for row, lp, m, done in zip(rows, lp_rows, lengths, ended):
        pos = lp[: P + m + 1] if done else lp[: P + m]
        generated = pos[P:]
        score = sum(generated) / max(len(generated), 1) ** length_penalty
        hyps.append(Hypothesis(row[: P + m], score, done, pos))
    return hyps
