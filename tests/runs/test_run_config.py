"""A run's config.json with sections of the wrong type: every command that opens the run says so in one
line (read_run_config checks it once), never a traceback from whichever command reads the section."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from attnlab.cli import main
from attnlab.data import Vocab, sample_data_path
from attnlab.models import build_model
from attnlab.runs.checkpoints import save_checkpoint
from attnlab.runs.config import read_run_config, write_run_config
from attnlab.runs.weights import save_weights
from attnlab.training import TrainConfig


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = tmp_path_factory.mktemp("config") / "run"
    vocab = Vocab(["i", "am", "home", ".", "go", "now"], min_freq=1)
    model_cfg = dict(
        num_hiddens=8, num_layers=1, num_heads=2, ffn_num_hiddens=16, dropout=0.0, max_len=16, src_vocab_size=len(vocab)
    )
    model_cfg["tgt_vocab_size"] = len(vocab)
    torch.manual_seed(0)
    model = build_model("transformer", model_cfg)
    data_cfg = {"loader": "translation", "path": str(sample_data_path())}
    write_run_config(run, "transformer", model_cfg, {"max_steps": 2}, data_cfg, src_vocab=vocab, tgt_vocab=vocab)
    save_weights(model, run / "model.safetensors")
    save_checkpoint(run, 1, model, {"step": 1}, {"step": 1})
    return run


COMMANDS = {
    "translate": ["translate", "--checkpoint", "{run}", "go ."],
    "evaluate": ["evaluate", "--checkpoint", "{run}", "--limit", "1"],
    "heads": ["heads", "--checkpoint", "{run}", "--out", "{tmp}/heads", "--limit", "1"],
    "attention": ["attention", "--checkpoint", "{run}", "--out", "{tmp}/att", "go ."],
    "export": ["export", "--checkpoint", "{run}", "--format", "ctranslate2", "--out", "{tmp}/ct2"],
    "resume": ["train", "--resume", "{run}"],
}
DAMAGE = {
    "model null": ("model", None, "'model' must be a JSON object"),
    "data null": ("data", None, "'data' must be a JSON object"),
    "train a list": ("train", [1, 2], "'train' must be a JSON object"),
    "model_type a number": ("model_type", 3, "'model_type' must be a string"),
    "precision a string": ("precision", "fp32", "'precision' must be a JSON object"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_wrong_section_type_is_one_line_in_every_command(run, tmp_path, capsys, command, damage):
    if command == "export":
        pytest.importorskip("ctranslate2")
    broken = tmp_path / "run"
    shutil.copytree(run, broken)
    key, value, words = DAMAGE[damage]
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**cfg, key: value}))
    argv = [a.format(run=broken, tmp=tmp_path) for a in COMMANDS[command]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "config.json" in err, err


@pytest.mark.parametrize("text, words", [("[1, 2]", "JSON array"), ("null", "holds null"), ("{", "not valid JSON")])
def test_config_that_is_not_an_object(run, tmp_path, text, words):
    broken = tmp_path / "run"
    shutil.copytree(run, broken)
    (broken / "config.json").write_text(text)
    with pytest.raises(ValueError, match=words):
        read_run_config(broken)


def test_a_config_with_fields_the_model_lacks_is_one_line(tmp_path, capsys):
    """A config.json whose model block names a field TransformerConfig does not have (an edit, or a spelling
    attnlab no longer reads): one line naming it, exit 2, the file left as it was."""

    vocab = Vocab(["i", "am", "home", ".", "go", "now"], min_freq=1)
    new = dict(num_hiddens=8, num_layers=1, num_heads=2, ffn_num_hiddens=16, dropout=0.0, max_len=16)
    new.update(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), positions="rope")
    torch.manual_seed(0)
    model = build_model("transformer", new)
    run = tmp_path / "old"
    write_run_config(
        run, "transformer", {**model.config.to_dict(), "rope_base": 500.0}, {}, {}, src_vocab=vocab, tgt_vocab=vocab
    )
    save_weights(model, run / "model.safetensors")
    before = (run / "config.json").read_text()
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "go now ."]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rope_base" in err[0], err
    assert (run / "config.json").read_text() == before  # nothing a user made is rewritten


@pytest.mark.parametrize("amp, precision", [(True, "bf16"), (False, "fp32")])
def test_a_run_with_the_older_amp_field_loads_with_one_note(tmp_path, capsys, amp, precision):
    """`amp` of an older run's training settings: read as `precision` (`amp: false` forced fp32), said once in
    one line, the file left as it was; today's TrainConfig has no such field."""

    vocab = Vocab(["i", "am", "home", ".", "go", "now"], min_freq=1)
    run = tmp_path / "old"
    train = {**TrainConfig().to_dict(), "precision": "bf16", "amp": amp}
    write_run_config(
        run, "transformer", {"src_vocab_size": 9, "tgt_vocab_size": 9}, train, {}, src_vocab=vocab, tgt_vocab=vocab
    )
    before = (run / "config.json").read_text()
    capsys.readouterr()
    cfg = read_run_config(run)
    read_run_config(run)  # the note comes once a process
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"amp={str(amp).lower()}" in err[0] and f"precision={precision!r}" in err[0]
    assert "amp" not in cfg["train"] and TrainConfig.from_dict(cfg["train"]).precision == precision
    with pytest.raises(ValueError, match="unknown TrainConfig keys \\['amp'\\]"):
        TrainConfig.from_dict({"amp": True})
    assert (run / "config.json").read_text() == before
