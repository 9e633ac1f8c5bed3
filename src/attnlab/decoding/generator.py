"""The one decoding loop, shaped as fairseq's SequenceGenerator: every strategy (`attnlab.decoding.search`)
runs through it, and it alone owns the prefix, finishing, shrinking the batch and reordering the caches.

    hyps = generate(model, src, src_lens, DecodeOptions(beam=4, n_best=2), bos=1, eos=2, max_len=30)

Per step: the model's logits for every live row -> log_softmax -> the bans (`processors`) -> the strategy's
`step` -> candidates. The <eos> candidates among each sentence's first K finish (`Finished`, the K best kept),
the first K others stay live; at a sentence's length limit its first K candidates finish as they are. A
sentence is done once K hypotheses finished and, unless `early_stopping`, no live one could beat the worst
of them at its current length (`transformers`' default heuristic: best live total / length ** penalty <=
worst finished), or at its limit, or once its output is settled: the n_best it returns have finished and no
live one could rank among them at any length (its total / limit ** penalty below them). Done sentences
leave the batch (at once, or once the strategy's `compact` fraction of it is done): every cache drops their
rows (`reorder_state`); live hypotheses that change parents reorder only the growing caches
(`same_sources=True`). The model is called only through the decoding protocol (`attnlab.decoding.protocol`).

Two modes over that shared start, shrink and reorder, as Hugging Face's `_sample` and `_beam_search`; the
strategy declares which (`Search.single`):
- one candidate per row (`RowLoop`: greedy, sampling): the candidate is the row's next token or its <eos>,
  a unit finishes once, outputs are tables of one row per unit read at the end. Sampling's n_best draws per
  source are n_best units of one row each; greedy's step is the C arg-max (`argmax.pick`) and its finished
  rows leave in bulk (`compact`).
- C >= 2K candidates per sentence (`BeamLoop`: beam and constrained beam search): the rows' history
  follows the beams, each sentence keeps its K best finished hypotheses.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnlab.decoding.constraints import ConstrainedBeamSearch
from attnlab.decoding.hypothesis import Finished, Hypothesis
from attnlab.decoding.loops import BeamLoop, RowLoop
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.processors import processors_for
from attnlab.decoding.protocol import check_source, inference
from attnlab.decoding.search import BeamSearch, Greedy, Sampling, Search

__all__ = ["generate", "make_search"]


def make_search(options: DecodeOptions, eos: int, bans: list, constraints=None, prefixes=None, *,
                generator=None) -> Search:  # fmt: skip
    """The strategy `options` ask for: constrained beam search where any sentence has phrases, sampling,
    sampling or greedy (beam 1) (each computing scores only where `options.scores`) or beam search."""
    if constraints is not None and any(constraints):
        return ConstrainedBeamSearch(options.beam, eos, constraints, prefixes, raw_logits=not bans)
    if options.sample:
        return Sampling(
            processors_for(options, eos)[1], generator, raw_logits=not bans, top_k=options.top_k, scores=options.scores
        )
    if options.beam == 1:
        return Greedy(options.scores, raw_logits=not bans)
    return BeamSearch(options.beam, raw_logits=not bans)


def generate(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor | None,
    options: DecodeOptions,
    *,
    bos: int,
    eos: int,
    max_len: int | Sequence[int],
    prefix: Tensor | None = None,
    constraints: Sequence[Sequence[Sequence[int]]] | None = None,
    generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """Decode B sources as `options` say: B lists of hypotheses, best first (n_best each where there are so many).

    Args:
        src: (B, S) source ids; src_valid_lens: (B,) or None.
        max_len: most steps after the prefix (<eos> included): one for all, or one per source.
        prefix: (B, P) target ids every output starts with (fed in one step after <bos>); outputs' tokens and
            positional scores include them, their score and its length do not.
        constraints: per source, phrases (token id lists) every output must contain.
        generator: sampling's random stream (seeded: reproducible samples).

    What comes back is an option too: `options.scores` False lets greedy skip the log-probabilities (score NaN,
    no positional scores); `options.trace` gives each source's best hypothesis, under beam search, the search's
    record of that sentence (`Hypothesis.trace`, `attnlab.decoding.trace`).
    """
    B = src.shape[0]
    limits = [max_len] * B if isinstance(max_len, int) else list(max_len)
    if len(limits) != B or any(not isinstance(n, int) or n < 1 for n in limits):
        raise ValueError(f"max_len must be at least 1, one for all or one per source ({B}), got {max_len!r}")
    check_source(src, src_valid_lens, None)
    copies = options.n_best if options.sample else 1  # units per source
    bans = processors_for(options, eos)[0]
    units_prefix = None if prefix is None else [row for row in prefix.tolist() for _ in range(copies)]
    units_cons = None if constraints is None else [list(c) for c in constraints for _ in range(copies)]
    search = make_search(options, eos, bans, units_cons, units_prefix, generator=generator)
    trace: list | None = [] if options.trace else None
    units = [n for n in limits for _ in range(copies)]  # one limit per unit
    mode = RowLoop if search.single else BeamLoop
    run = mode(model, search, options, bans=bans, eos=eos, limits=units, copies=copies, trace=trace)
    with inference(model), torch.inference_mode():
        run.start(src, src_valid_lens, bos, prefix)
        for step in range(max(limits)):
            if run.advance(step):
                break
        finished = run.results()
    out = [_ranked([f for u in range(b * copies, (b + 1) * copies) for f in finished[u]], options.n_best, trace, b)
           for b in range(B)]  # fmt: skip
    if trace is not None:  # each sentence's records (beam search: its steps; any: its winner) go with its best
        for b, hyps in enumerate(out):
            hyps[0].trace = [r for r in trace if r["sentence"] == b]
    return out


def _ranked(fin: list[Finished], n_best: int, trace: list | None, b: int) -> list[Hypothesis]:
    """A source's n-best list: most constraint phrases first, then best score (stable: ties keep finishing order)."""
    ranked = sorted(fin, key=lambda f: (-f.met, -f.score))[:n_best]
    if trace is not None:
        trace.append({"sentence": b, "winner": list(ranked[0].origin) if ranked and ranked[0].origin else None})
    return [f.hypothesis() for f in ranked] or [Hypothesis([], float("-inf"), False, [])]
