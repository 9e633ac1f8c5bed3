"""Beam search's length penalty reaches the search from `Translator.decode` and `attnlab evaluate
--length-penalty` (a decoding lever measured on validation, BENCHMARKS.md "laptop preset")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_translator import EN, tiny
from train_helpers import SUBPROCESS_ENV, needs_data, tiny_run

from attnlab.decoding.generator import generate
from attnlab.decoding.translator import Translator

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[2]


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
        opts = translator.options(beam=3, length_penalty=alpha)
        hyps = [hs[0] for hs in translator.search(ids, opts)]
        direct = generate(model, batch[order], lens[order], opts, bos=tgt.bos, eos=tgt.eos, max_len=2 * S + 10)
        for i, (h, *_) in zip(order, direct):
            assert hyps[i].tokens == h.tokens and hyps[i].score == pytest.approx(h.score)
        got[alpha] = [h.score for h in hyps]
    # Scores are normalised by len ** alpha: with multi-token outputs they must differ between alphas.
    assert got[0.0] != got[1.0] != got[2.0]
    # Greedy's tokens do not depend on it (its scores do: the same normalisation).
    greedy = [[h.tokens for h in hs] for hs in translator.search(ids, translator.options(beam=1, length_penalty=0.0))]
    assert greedy == [[h.tokens for h in hs] for hs in translator.search(ids, translator.options(beam=1))]


@pytest.mark.parametrize("bad", ["-0.5", "nan", "6"])
def test_evaluate_refuses_a_bad_length_penalty_before_loading_anything(bad, tmp_path, capsys):
    from attnlab.cli import main

    assert main(["evaluate", "--checkpoint", str(tmp_path / "none"), "--length-penalty", bad]) == 2
    assert "--length-penalty must be a finite number >= 0 and <= 5" in capsys.readouterr().err


@needs_data
def test_decode_levers_benchmark_scores_every_setting_on_validation(tmp_path):
    """benchmarks/quality/decode_levers.py: one row per (weights, beam, alpha), greedy once per weights."""
    run = tmp_path / "run"
    tiny_run(run, max_steps=2, checkpoint_every=1, keep_last=5)
    ckpt = sorted((run / "checkpoints").iterdir())[0]
    rows = tmp_path / "rows.jsonl"
    cmd = [
        sys.executable,
        "benchmarks/quality/decode_levers.py",
        "--checkpoint",
        str(run),
        "--weights",
        f"final,{ckpt}",
    ]
    cmd += ["--beams", "1,2", "--length-penalties", "0.5,1.0", "--limit", "10", "--json", str(rows)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=SUBPROCESS_ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CPU features:" in done.stdout and "valid split, 10 distinct sources" in done.stdout
    records = [json.loads(line) for line in rows.read_text().splitlines()]
    settings = [(r["weights"] == "final", r["beam"], r["length_penalty"]) for r in records]
    assert settings == [(w, b, a) for w in (True, False) for b, a in ((1, None), (2, 0.5), (2, 1.0))]
    assert all(r["split"] == "valid" and r["sources"] == 10 and 0 <= r["bleu"] <= 100 for r in records)
