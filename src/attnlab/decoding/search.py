"""One step of beam search, apart from the loop around it (as fairseq's `search.BeamSearch.step`).

    cand_scores, cand_tokens, cand_beams = beam_step(lprobs, scores)   # (n, K, V), (n, K) -> 3 x (n, 2K)

Taking 2K candidates per sentence guarantees K that do not end in <eos>, so the beam stays full even
when up to K candidates finish at this step.
"""

from __future__ import annotations

from torch import Tensor


def beam_step(lprobs: Tensor, scores: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The best 2K continuations of each sentence's K live hypotheses.

    Args:
        lprobs: (n, K, V) log-probabilities of the next token after each live hypothesis.
        scores: (n, K) total log-probability of each live hypothesis so far (-inf: an unused beam, as
            at the first step, where only beam 0 may expand).

    Returns:
        cand_scores: (n, min(2K, K*V)) total log-probability of each candidate, best first.
        cand_tokens: (n, min(2K, K*V)) the token it appends.
        cand_beams: (n, min(2K, K*V)) the beam (0..K-1) it extends.

    Examples:
        >>> import torch
        >>> lprobs = torch.log(torch.tensor([[[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]]]))   # n=1, K=2, V=3
        >>> s, t, b = beam_step(lprobs, torch.tensor([[0.0, float("-inf")]]))
        >>> t[0, :3].tolist(), b[0, :3].tolist()   # beam 1 is unused: the finite candidates extend beam 0
        ([0, 1, 2], [0, 0, 0])
    """
    n, K, V = lprobs.shape
    cand = (scores.unsqueeze(-1) + lprobs).reshape(n, K * V)
    cand_scores, idx = cand.topk(min(2 * K, K * V), dim=1)  # sorted, best first
    return cand_scores, idx % V, idx // V
