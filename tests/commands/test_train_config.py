"""`attnlab train --print-config` / `--config FILE` / `--tensorboard DIR`, and the one-line answer of a command
whose optional extra is missing."""

from __future__ import annotations

import json
import math
import sys

import pytest
from train_helpers import needs_data, train_argv

from attnlab.cli import main


def _printed(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_print_config_has_a_run_configs_sections_and_the_flags(capsys, tmp_path):
    cfg = _printed(
        capsys, ["train", "--preset", "tiny", "--lr", "0.02", "--set", "model.num_layers=2", "--print-config"]
    )
    assert set(cfg) == {"model_type", "model", "train", "data", "attnlab_version"}
    assert cfg["model_type"] == "transformer" and cfg["train"]["lr"] == 0.02 and cfg["model"]["num_layers"] == 2
    assert "dropout" in cfg["model"] and "warmup_steps" in cfg["train"]  # every field, not only the preset's
    assert not (tmp_path / "runs").exists()  # printed, nothing written


def test_print_config_round_trips_through_config(capsys, tmp_path):
    first = _printed(capsys, ["train", "--model", "bahdanau", "--preset", "d2l", "--seed", "3", "--print-config"])
    path = tmp_path / "my.json"
    path.write_text(json.dumps(first), encoding="utf-8")
    assert _printed(capsys, ["train", "--config", str(path), "--print-config"]) == first
    again = _printed(capsys, ["train", "--config", str(path), "--epochs", "7", "--print-config"])
    assert again["train"]["epochs"] == 7 and again["model_type"] == "bahdanau"  # flags override the file


@needs_data
def test_training_from_a_printed_config_gives_the_same_run_config(capsys, tmp_path):
    flags = train_argv(tmp_path / "direct", "--lr", "0.004", steps=2)
    assert main(flags) == 0
    printed = _printed(capsys, [*train_argv(tmp_path / "unused", "--lr", "0.004", steps=2), "--print-config"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(printed), encoding="utf-8")
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "from-file"), "--no-progress"]) == 0
    direct, from_file = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("direct", "from-file"))
    assert from_file == direct
    for section in ("train", "data"):
        assert printed[section] == direct[section]
    assert printed["model"].items() <= direct["model"].items()  # the run adds only the vocabulary sizes


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preset", "tiny"], "--config replaces --preset"),
        (["--model", "bahdanau"], "disagrees with"),
        (["--resume", "runs/x"], "give one of them"),
    ],
)
def test_config_conflicts_are_one_line(capsys, tmp_path, argv, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_type": "transformer", "model": {}, "train": {}, "data": {}}), encoding="utf-8")
    assert main(["train", "--config", str(path), *argv, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_config_with_unknown_keys_is_refused(capsys, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_type": "transformer", "modle": {}}), encoding="utf-8")
    assert main(["train", "--config", str(path), "--print-config"]) == 2
    assert "unknown keys ['modle']" in capsys.readouterr().err


@needs_data
def test_tensorboard_holds_the_scalars_of_log_jsonl(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, tb = tmp_path / "run", tmp_path / "tb"
    argv = train_argv(run, "--tensorboard", str(tb), "--log-every", "1", "--eval-every", "2", steps=4)
    assert main(argv) == 0
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    acc = EventAccumulator(str(tb))
    acc.Reload()
    for kind, key, tag in [
        ("train", "loss", "train/loss"),
        ("train", "lr", "train/lr"),
        ("train", "tokens_per_s", "train/tokens_per_s"),
        ("eval", "valid_bleu", "valid/bleu"),
        ("eval", "valid_loss", "valid/loss"),
    ]:
        want = [(e["step"], e[key]) for e in events if e["event"] == kind and e.get(key) is not None]
        got = [(s.step, s.value) for s in acc.Scalars(tag)]
        assert want and [s for s, _ in got] == [s for s, _ in want], tag
        assert all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-6) for (_, g), (_, w) in zip(got, want)), tag
    # The folder is attnlab's now: a second run refuses it unless --force, and then replaces it.
    assert main(train_argv(tmp_path / "run2", "--tensorboard", str(tb), steps=1)) == 2
    assert not (tmp_path / "run2").exists()


def test_tensorboard_without_the_extra_names_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard -> ImportError
    out = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--out", str(out), "--tensorboard", str(tmp_path / "tb")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "pip install 'attnlab[tensorboard]'" in err and err.count("\n") == 1
    assert not out.exists() and not (tmp_path / "tb").exists()


def test_serve_without_the_extra_names_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert main(["serve", "--checkpoint", "no-such-run"]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip() == "attnlab serve: error: attnlab serve needs uvicorn: install it with pip install 'attnlab[serve]'"
    )
