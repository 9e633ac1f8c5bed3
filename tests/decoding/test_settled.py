"""A beam sentence leaves the batch once its output is settled (`BeamLoop._settled`): the n_best hypotheses it
returns have finished and no continuation of a live one could rank among them. The reference is the same
search with the rule off (it runs on until K finished and the length heuristic, or the limit): the same
tokens and scores for every sentence — plain and constrained beam search, n_best 1 and 2 of beam 4, length
penalties 0, 1 and 2 — and fewer rows decoded; and a scripted sentence whose second hypothesis is still to
come when its best has finished."""

from __future__ import annotations

import pytest
import torch
from test_constraints import Bigram  # tests/decoding is on sys.path (no __init__)

from attnlab.decoding.generator import generate
from attnlab.decoding.loops import BeamLoop
from attnlab.decoding.options import DecodeOptions
from attnlab.models import Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2
V, B, S = 12, 24, 7

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(seed: int) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(V, V, num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=24, dropout=0.0)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # <eos> likely enough that hypotheses finish at many different steps
        model.decoder.dense.bias[EOS] += 1.5
    return model


def _sources(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (B, S), generator=g)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    return src.masked_fill(torch.arange(S) >= lens[:, None], PAD), lens


def _decode(model, seed: int, options: DecodeOptions, constrained: bool, settle: bool, monkeypatch):
    """(every sentence's (tokens, score) list, rows decoded) with the rule on or off."""
    src, lens = _sources(seed)
    g = torch.Generator().manual_seed(seed + 1)
    phrases = [[torch.randint(3, V, (int(n),), generator=g).tolist()] for n in torch.randint(1, 3, (B,), generator=g)]
    rows = []
    step = model.decode_step
    with monkeypatch.context() as m:
        m.setattr(model, "decode_step", lambda tgt, state: (rows.append(tgt.shape[0]), step(tgt, state))[1])
        if not settle:
            m.setattr(BeamLoop, "_settled", lambda self, best, units: torch.zeros_like(best, dtype=torch.bool))
        cons = phrases if constrained else None
        out = generate(model, src, lens, options, bos=BOS, eos=EOS, max_len=14, constraints=cons)
    return [[(h.tokens, round(h.score, 5)) for h in hyps] for hyps in out], sum(rows)


@pytest.mark.parametrize("constrained", [False, True], ids=["beam", "constrained"])
@pytest.mark.parametrize("n_best", [1, 2])
def test_a_settled_sentence_leaves_with_the_output_it_would_have_had(constrained, n_best, monkeypatch):
    saved = kept = 0
    for alpha in (0.0, 1.0, 2.0):
        for seed in range(3):
            model, options = _model(seed), DecodeOptions(beam=4, n_best=n_best, length_penalty=alpha)
            fast, fast_rows = _decode(model, seed, options, constrained, True, monkeypatch)
            full, full_rows = _decode(model, seed, options, constrained, False, monkeypatch)
            assert fast == full, f"length penalty {alpha}, seed {seed}"
            saved, kept = saved + full_rows - fast_rows, kept + full_rows
    assert saved > 0.05 * kept  # the rule ends sentences early


def test_the_second_of_two_returned_waits_for_a_live_hypothesis_that_could_still_take_its_place():
    """After one step "a" and "b" have ended (-0.69, -1.61) and "c", which ends surely as "c d", is live at -1.20:
    the best is settled, the second is not, so n_best 2 returns "c d" second, and n_best 1 ends there (the rule
    off, it runs a third step, as n_best 2 must)."""
    A, B, C, D = 3, 4, 5, 6
    model = Bigram({BOS: {A: 0.5, B: 0.2, C: 0.3}, A: {EOS: 1.0}, B: {EOS: 1.0}, C: {D: 1.0}, D: {EOS: 1.0}})
    src = torch.zeros((1, 2), dtype=torch.long)
    steps = []
    step = model.decode_step
    model.decode_step = lambda tgt, state: (steps.append(1), step(tgt, state))[1]
    for n_best, want, ran in ((2, [[A], [C, D]], 3), (1, [[A]], 2)):
        options = DecodeOptions(beam=4, n_best=n_best, length_penalty=0.0)
        steps.clear()
        (hyps,) = generate(model, src, None, options, bos=BOS, eos=EOS, max_len=6)
        assert [h.tokens for h in hyps] == want
        assert len(steps) == ran  # to "c d <eos>"; to "a <eos>" alone
