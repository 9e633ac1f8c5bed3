"""A model whose training cannot fit the machine's memory is one line (exit 2) before anything is built,
loaded or written; the parameter count it rests on is a built model's."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main
from attnlab.data.corpus import sample_data_path
from attnlab.models import build_model
from attnlab.training.config import TrainConfig
from attnlab.training.sizes import check_fits, parameters, training_bytes


@pytest.mark.parametrize(
    "model_type, config",
    [
        ("transformer", {"num_hiddens": 16, "num_heads": 2, "num_layers": 2, "ffn_num_hiddens": 24}),
        ("decoder-only", {"num_hiddens": 16, "num_heads": 2, "num_layers": 2, "ffn_num_hiddens": 24}),
        ("bahdanau", {"embed_size": 8, "num_hiddens": 16, "num_layers": 1}),
    ],
)
def test_parameters_are_a_built_models(model_type, config):
    config = {"src_vocab_size": 30, "tgt_vocab_size": 40, **config}
    built = build_model(model_type, config)
    assert parameters(model_type, config) == sum(p.numel() for p in built.parameters())


def _train(tmp_path, *flags):
    out = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--max-steps", "1", "--no-progress", "--device", "cpu"]
    return main([*argv, "--data", str(sample_data_path()), "--out", str(out), *flags]), out


def test_a_billion_wide_model_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("attnlab.training.launch.load_data", lambda *a: pytest.fail("data loaded"))
    code, out = _train(tmp_path, "--set", "model.num_hiddens=1000000000")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "this machine has" in err and "lower model.num_hiddens (1,000,000,000" in err
    assert not out.exists()


def test_a_config_file_with_300000_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "big.json"
    model = {"num_hiddens": 300_000, "num_heads": 4, "num_layers": 2, "ffn_num_hiddens": 64}
    cfg.write_text(json.dumps({"model_type": "transformer", "model": model, "train": {"max_steps": 1}}))
    out = tmp_path / "run"
    code = main(["train", "--config", str(cfg), "--data", str(sample_data_path()), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "lower model.num_hiddens (300,000" in err
    assert not out.exists()


def test_what_fits_passes_and_the_estimate_counts_the_batch():
    small = {"src_vocab_size": 50, "tgt_vocab_size": 50, "num_hiddens": 32, "num_heads": 2, "num_layers": 2}
    check_fits("transformer", small, TrainConfig(device="cpu"))
    P, few = training_bytes("transformer", small, TrainConfig(batch_tokens=256))
    _, many = training_bytes("transformer", small, TrainConfig(batch_tokens=4096))
    assert few > 16 * P and many > few


def test_a_shallow_decoder_is_counted_at_its_own_depth(monkeypatch):
    base = {"src_vocab_size": 50, "tgt_vocab_size": 50, "num_hiddens": 32, "num_heads": 2, "ffn_num_hiddens": 64}
    train = TrainConfig(batch_tokens=512)
    sizes = {(e, d): training_bytes("transformer", {**base, "num_layers": e, "decoder_layers": d}, train)
             for e, d in ((4, 1), (4, 4), (1, 1), (1, 4))}  # fmt: skip
    assert sizes[1, 1] < sizes[4, 1] < sizes[4, 4]
    assert sizes[4, 1][0] - sizes[1, 1][0] != sizes[1, 4][0] - sizes[1, 1][0]  # encoder and decoder blocks differ
    assert training_bytes("transformer", {**base, "num_layers": 4}, train) == sizes[4, 4]
    # Over the memory, the advice names decoder_layers when it is the size furthest above its default.
    monkeypatch.setattr("attnlab.training.sizes.device_memory", lambda device: 1)
    with pytest.raises(ValueError, match=r"lower model\.decoder_layers \(30; the default is 6\)"):
        check_fits("transformer", {**base, "num_layers": 2, "decoder_layers": 30}, TrainConfig(device="cpu"))


def test_a_bad_decoder_depth_is_one_line_before_anything_is_written(tmp_path, capsys):
    code, out = _train(tmp_path, "--set", "model.decoder_layers=0")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "decoder_layers" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "setting, named",
    [("model.max_len=1000000000", "model.max_len"), ("model.num_layers=100000", "model.num_layers")],
)
def test_position_tables_and_layer_counts_are_in_the_size_check(tmp_path, capsys, monkeypatch, setting, named):
    """A billion positions (a sinusoidal table of gigabytes, a buffer: no parameter) or 100,000 layers: one
    line at once, from the config's numbers, before any model (even a meta-device one) is built."""
    monkeypatch.setattr("attnlab.training.launch.load_data", lambda *a: pytest.fail("data loaded"))
    monkeypatch.setattr("attnlab.training.sizes.parameters", lambda *a: pytest.fail("a model was built"))
    monkeypatch.setattr("attnlab.training.sizes.memory_bytes", lambda: 8 * 2**30)
    code, out = _train(tmp_path, "--set", setting)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"lower {named}" in err, err
    assert not out.exists()


def test_a_billion_batch_tokens_names_the_batch_not_the_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("attnlab.training.launch.load_data", lambda *a: pytest.fail("data loaded"))
    code, out = _train(tmp_path, "--batch-tokens", "1000000000")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "lower train.batch_tokens (1,000,000,000" in err, err
    assert "model." not in err
