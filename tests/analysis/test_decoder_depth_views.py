"""Looking inside a run whose decoder is shallower than its encoder (3 + 1 blocks): the recorded maps, the
notebook views, head masks, `attnlab heads` and `attnlab attention` count each stack's own layers."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab import explain
from attnlab.analysis.notebook import head_view, model_view
from attnlab.analysis.positions import position_maps
from attnlab.cli import main
from attnlab.data import load_data, sample_data_path
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.config import write_run_config
from attnlab.runs.loading import load_translator
from attnlab.runs.weights import save_weights

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d2l = {"loader": "d2l", "path": str(sample_data_path()), "num_examples": 40, "num_steps": 10, "min_freq": 1}
    data = load_data(d2l)
    torch.manual_seed(0)
    cfg = TransformerConfig(
        len(data.src_vocab), len(data.tgt_vocab), 8, 2, 3, 16, dropout=0.0, max_len=16, decoder_layers=1
    )
    run = tmp_path_factory.mktemp("depths") / "run"
    write_run_config(
        run, "transformer", cfg.to_dict(), {"num_steps": 10}, d2l, src_vocab=data.src_vocab, tgt_vocab=data.tgt_vocab
    )
    save_weights(Transformer(cfg), run / "model.safetensors")
    return run


def test_maps_and_views_have_each_stacks_layers(run):
    translator = load_translator(run)
    ex = explain(translator, "go .", translator.options(beam=1))
    assert [ex.maps[k].shape[0] for k in ("encoder_self", "decoder_self", "cross")] == [3, 1, 1]
    assert len(model_view(ex, kind="encoder_self").data["attention"]["encoder_self"]) == 3
    fig = head_view(ex, kind="encoder_self", layer=2).figure()
    assert len([a for a in fig.axes if a.images]) == 2  # the third encoder layer's two heads
    with pytest.raises(ValueError, match=r"layer must be in 0..0 for cross"):
        head_view(ex, kind="cross", layer=1)


def test_head_masks_name_layers_of_their_own_stack(run):
    translator = load_translator(run)
    off = explain(translator, "go .", translator.options(beam=1), heads_off={"encoder_self": [[2, 1]]})
    assert off.maps["encoder_self"].shape[0] == 3
    with pytest.raises(ValueError, match=r"heads_off.cross: layer 1 out of range; this model has layers 0..0"):
        explain(translator, "go .", translator.options(beam=1), heads_off={"cross": [[1, 0]]})


def test_heads_and_attention_commands(run, tmp_path):
    quick = ["--limit", "3", "--no-bleu", "--no-curve", "--split", "train"]
    assert main(["heads", "--checkpoint", str(run), "--out", str(tmp_path / "heads"), *quick]) == 0
    report = json.loads((tmp_path / "heads" / "heads.json").read_text())
    assert {k: len(v) for k, v in report["kinds"].items()} == {"encoder self": 3, "decoder self": 1, "cross": 1}
    assert len(report["gradient_importance"]) == 5
    assert main(["attention", "--checkpoint", str(run), "--out", str(tmp_path / "att"), "go ."]) == 0
    assert any((tmp_path / "att").iterdir())


def test_position_maps_of_a_3_plus_1_t5_model():
    torch.manual_seed(0)
    cfg = TransformerConfig(12, 12, num_hiddens=16, num_heads=4, num_layers=3, decoder_layers=1, positions="t5")
    maps = position_maps(Transformer(cfg).eval(), 5, 3)
    assert len(maps["encoder_self"]) == 4 and len(maps["decoder_self"][0]) == 3  # per head, per stack
