"""CTranslate2 export of the position schemes and key/value head layouts its spec holds (rope, t5, none,
grouped- and multi-query attention): a tiny Transformer trained here on the reversal task (which needs
positions) decodes in CTranslate2 token-identically to attnlab's fp32 greedy; alibi is refused in one line."""

from __future__ import annotations

import random

import pytest
import torch

from attnlab.attention.positions import POSITIONS
from attnlab.cli import main
from attnlab.data import Vocab
from attnlab.export.ctranslate2.positions import exportable
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.config import write_run_config
from attnlab.runs.layout import WEIGHTS_FILE
from attnlab.runs.loading import load_translator
from attnlab.runs.weights import save_weights

from .test_ct2_converter import _both, _task, _train  # skips this module too without ctranslate2

ctranslate2 = pytest.importorskip("ctranslate2")

pytestmark = pytest.mark.usefixtures("one_thread")

ACCEPTED = {
    "rope": dict(positions="rope"),
    # partial rotation, another base and pre-norm: rotary_dim, rotary_base and the final norms
    "rope-half-base500-pre": dict(positions="rope", position_options={"fraction": 0.5, "base": 500.0}, norm_first=True),
    # few buckets, so the 2-8 token sentences reach T5's logarithmic buckets and the shared last one
    "t5-8buckets": dict(positions="t5", position_options={"num_buckets": 8, "max_distance": 12}),
    "t5-gqa2-pre": dict(positions="t5", num_kv_heads=2, norm_first=True),
    "none": dict(positions="none"),
    "sinusoidal-mqa": dict(num_kv_heads=1),
    "rope-gqa2-pre": dict(positions="rope", num_kv_heads=2, norm_first=True),
}


def _run(tmp_path, option: dict, train: bool = True):
    torch.manual_seed(0)
    pairs = _task(random.Random(0), 400)
    vocab = Vocab([w for s, t in pairs for w in (s + " " + t).split()], min_freq=1)
    cfg = TransformerConfig(
        len(vocab), len(vocab), num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64, dropout=0.0, **option
    )
    model = Transformer(cfg)
    if cfg.positions == "t5":  # T5 tables start at zero: make them matter from the first step
        for stack in (model.encoder, model.decoder):
            torch.nn.init.normal_(stack.relative_bias.embedding.weight)
    if train:
        _train(model, vocab, pairs)
    run = tmp_path / "run"
    write_run_config(run, "transformer", cfg.to_dict(), {}, {}, src_vocab=vocab, tgt_vocab=vocab)
    save_weights(model, run / WEIGHTS_FILE)
    return run


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_scheme_greedy_is_token_identical(tmp_path, name):
    run = _run(tmp_path, ACCEPTED[name])
    out = tmp_path / "ct2"
    assert main(["export", "--checkpoint", str(run), "--format", "ctranslate2", "--out", str(out)]) == 0
    translator = load_translator(run)
    sample = [s for s, _ in _task(random.Random(7), 20)]
    ours, theirs = _both(translator, ctranslate2.Translator(str(out), intra_threads=1), sample, beam=1)
    assert ours == theirs
    if ACCEPTED[name].get("positions") != "none":  # position-blind models cannot learn to reverse
        correct = sum(o == [w for w in reversed(s.split()) if w != "w0"] for o, s in zip(ours, sample))
        assert correct >= len(sample) // 4, f"{correct}/{len(sample)}: the comparison is between untrained models"


@pytest.mark.parametrize("option", [dict(positions="alibi"), dict(positions="alibi", num_kv_heads=1)])
def test_alibi_is_refused_in_one_line(tmp_path, capsys, option):
    run = _run(tmp_path, option, train=False)
    assert main(["export", "--checkpoint", str(run), "--format", "ctranslate2", "--out", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "positions='alibi'" in err and "encoder" in err, err
    assert not (tmp_path / "ct2").exists()


def test_every_scheme_is_accepted_or_refused():
    """The table the docs show names every scheme the config knows, and only alibi is refused."""
    assert set(exportable()) == set(POSITIONS)
    assert [p for p, how in exportable().items() if how is None] == ["alibi"]
    assert {o.get("positions", "sinusoidal") for o in ACCEPTED.values()} | {"learned"} == set(POSITIONS) - {"alibi"}
