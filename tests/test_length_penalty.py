"""Beam search's length penalty reaches the search from `Translator.decode` and `attnlab evaluate
--length-penalty` (a decoding lever measured on validation, BENCHMARKS.md "laptop preset")."""

from __future__ import annotations

import pytest
import torch
from test_translator import EN, tiny

from attnlab.decode import beam_search
from attnlab.translator import Translator

pytestmark = pytest.mark.usefixtures("one_thread")


def test_translator_passes_the_length_penalty_to_beam_search():
    model, src, tgt = tiny()
    model.eval()
    translator = Translator(model, src, tgt, config={})
    ids = [src.encode(" ".join(words)) for words in EN]
    seqs = [s + [src.eos] for s in ids]
    S = max(map(len, seqs))
    batch = torch.tensor([s + [src.pad] * (S - len(s)) for s in seqs])
    lens = torch.tensor([len(s) for s in seqs])
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # the translator decodes longest first
    got = {}
    for alpha in (0.0, 1.0, 2.0):
        hyps = translator.decode(ids, beam=3, length_penalty=alpha)
        direct = beam_search(
            model, batch[order], lens[order], tgt.bos, tgt.eos, beam=3, length_penalty=alpha, max_len=2 * S + 10
        )
        for i, h in zip(order, direct):
            assert hyps[i].tokens == h.tokens and hyps[i].score == pytest.approx(h.score)
        got[alpha] = [h.score for h in hyps]
    # Scores are normalised by len ** alpha: with multi-token outputs they must differ between alphas.
    assert got[0.0] != got[1.0] != got[2.0]
    assert translator.decode_ids(ids, beam=3, length_penalty=2.0) == [
        h.tokens for h in translator.decode(ids, 3, 128, 2.0)
    ]
    # Greedy has no length penalty: beam 1 ignores it.
    assert translator.decode_ids(ids, beam=1, length_penalty=0.0) == translator.decode_ids(ids, beam=1)


@pytest.mark.parametrize("bad", ["-0.5", "nan", "6"])
def test_evaluate_refuses_a_bad_length_penalty_before_loading_anything(bad, tmp_path, capsys):
    from attnlab.cli import main

    assert main(["evaluate", "--checkpoint", str(tmp_path / "none"), "--length-penalty", bad]) == 2
    assert "--length-penalty must be 0..5" in capsys.readouterr().err
