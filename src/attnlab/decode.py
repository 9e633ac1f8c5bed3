"""Greedy and beam-search decoding over any translator that follows the decoding protocol
(`start_decoding`, `decode_step`, `reorder_state`; see ARCHITECTURE.md).

Both are batched: every sentence of `src` is decoded at once (beam search on B * beam rows), and both put
the model in eval mode for the duration (no dropout at inference), restoring its mode afterwards.
Returned token lists exclude <bos> and <eos>.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["greedy", "beam_search", "attention_maps"]


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


def greedy(model: nn.Module, src: Tensor, src_valid_lens: Tensor | None, bos: int, eos: int, max_len: int,
           use_cache: bool = True) -> list[list[int]]:
    """Pick the most likely token at every step until <eos> or `max_len` tokens.

    Args:
        src: (B, S) source ids; src_valid_lens: (B,) or None.
        eos: a sentence stops at its first <eos>; the loop stops once all have (eos=-1 never stops).
        use_cache: decode one token per step against the model's cache; False re-runs
            `model(src, prefix, src_valid_lens)` on the whole prefix every step (the slow baseline).
    Returns:
        B token lists, without <bos>/<eos>.
    """
    _check(src, src_valid_lens, max_len)
    B = src.shape[0]
    with _inference(model):
        prefix = torch.full((B, 1), bos, dtype=torch.long, device=src.device)  # (B, t)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        lengths = torch.full((B,), max_len, dtype=torch.long)  # tokens kept per sentence
        state = model.start_decoding(src, src_valid_lens) if use_cache else None
        for step in range(max_len):
            if use_cache:
                logits, state = model.decode_step(prefix[:, -1:], state)
            else:
                logits = model(src, prefix, src_valid_lens)
            nxt = logits[:, -1].argmax(dim=-1)  # (B,)
            prefix = torch.cat([prefix, nxt[:, None]], dim=1)
            new_eos = (nxt == eos) & ~finished
            lengths[new_eos.cpu()] = step
            finished |= new_eos
            if bool(finished.all()):
                break
        rows = prefix[:, 1:].tolist()
    return [row[:n] for row, n in zip(rows, lengths.tolist())]


def beam_search(model: nn.Module, src: Tensor, src_valid_lens: Tensor | None, bos: int, eos: int, beam: int = 4,
                length_penalty: float = 1.0, max_len_a: float = 0.0, max_len_b: int = 50,
                max_len: int | None = None, return_scores: bool = False):
    """Beam search with length-normalised finished hypotheses (GNMT/fairseq: score / len ** alpha).

    Each step expands every live hypothesis of a sentence and keeps the 2*beam best continuations:
    those ending in <eos> among the top `beam` finish; the best `beam` others stay live. A sentence is
    done once it has `beam` finished hypotheses (so beam=1 is exactly greedy), or at its length limit,
    `max_len` if given, else `max_len_a * source_length + max_len_b`, where its live hypotheses finish.

    Args:
        length_penalty: alpha; 0 ranks by total log-probability (favours short outputs), 1 by per-token
            average. The length counts the <eos> token when there is one.
    Returns:
        B best token lists (without <bos>/<eos>); with return_scores, also their normalised scores.
    """
    _check(src, src_valid_lens, max_len)
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    B, K, device = src.shape[0], beam, src.device
    src_lens = src_valid_lens.cpu() if src_valid_lens is not None else torch.full((B,), src.shape[1])
    limits = [max_len if max_len is not None else max(1, int(max_len_a * int(n) + max_len_b)) for n in src_lens]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = [False] * B

    with _inference(model):
        state = model.start_decoding(src, src_valid_lens)
        state = model.reorder_state(state, torch.arange(B, device=device).repeat_interleave(K))  # B*K rows
        # All K copies start identical: only the first may expand, or the beam fills with duplicates.
        scores = torch.full((B, K), float("-inf"), device=device)
        scores[:, 0] = 0.0
        tokens = torch.empty((B * K, 0), dtype=torch.long, device=device)  # history, without <bos>
        inp = torch.full((B * K, 1), bos, dtype=torch.long, device=device)
        for step in range(max(limits)):
            logits, state = model.decode_step(inp, state)
            logprobs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (B*K, V)
            V = logprobs.shape[-1]
            cand = (scores.reshape(B * K, 1) + logprobs).reshape(B, K * V)
            top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)  # (B, 2K), sorted best first
            top_beam, top_tok = top_idx // V, top_idx % V

            # Hypotheses ending in <eos> among the top K finish (their length counts the <eos>).
            is_eos = top_tok == eos
            hits = (is_eos[:, :K] & torch.isfinite(top_scores[:, :K])).nonzero().tolist()
            if hits:
                hist = tokens.tolist()
                for b, r in hits:
                    if not done[b] and len(finished[b]) < K:
                        raw = float(top_scores[b, r])
                        seq = hist[b * K + int(top_beam[b, r])]
                        finished[b].append((raw / (step + 1) ** length_penalty, seq))

            # The best K continuations that are not <eos> stay live (there are at least K of 2K).
            live_scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(K, dim=1)  # (B, K)
            rows = (torch.arange(B, device=device)[:, None] * K + top_beam.gather(1, pick)).reshape(-1)
            new_tok = top_tok.gather(1, pick).reshape(-1)
            tokens = torch.cat([tokens.index_select(0, rows), new_tok[:, None]], dim=1)
            scores = live_scores
            state = model.reorder_state(state, rows)
            inp = new_tok[:, None]

            for b in range(B):
                if done[b]:
                    continue
                if len(finished[b]) >= K:
                    done[b] = True
                elif step + 1 >= limits[b]:  # length limit: the live hypotheses finish as they are
                    hist = tokens[b * K:(b + 1) * K].tolist()
                    for k in range(K):
                        if len(finished[b]) < K and torch.isfinite(scores[b, k]):
                            finished[b].append((float(scores[b, k]) / (step + 1) ** length_penalty, hist[k]))
                    done[b] = True
            if all(done):
                break

    best = [max(f, key=lambda x: x[0]) if f else (float("-inf"), []) for f in finished]
    hyps = [seq for _, seq in best]
    return (hyps, [s for s, _ in best]) if return_scores else hyps


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
