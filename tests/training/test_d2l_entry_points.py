"""The book's d2l Transformer is one model whichever way it is trained — in-process (as
tests/test_train.py does), `attnlab train`, or `attnlab demo` — and whatever thread count the caller
runs at. The suite runs at one thread while users run at all their cores; before the d2l preset pinned
its thread count the three paths trained different models (the same seed, different float sums), and
the demo and the CLI missed one of the book's sentences the test translated."""

from __future__ import annotations

import json

import pytest
import torch
from train_helpers import DATA, needs_data

from attnlab.training.config import TrainConfig
from attnlab.utils.runtime import intra_op_threads

STEPS = 30  # enough for thread-dependent rounding to reach every weight's last bits (checked before the fix)


@needs_data
def test_d2l_preset_trains_one_model_from_every_entry_point_at_any_thread_count(tmp_path):
    from safetensors.torch import load_file

    from attnlab.chapter.demo import train_model
    from attnlab.cli import main
    from attnlab.training.launch import train_run
    from attnlab.training.presets import get_preset

    preset = get_preset("transformer", "d2l")
    with intra_op_threads(1):  # the test suite's way (the one_thread fixture)
        train_run(
            "transformer",
            preset["model"],
            TrainConfig.from_dict({**preset["train"], "max_steps": STEPS}),
            {**preset["data"], "path": DATA},
            tmp_path / "inproc",
            progress=False,
        )
    with intra_op_threads(2):  # a user's 2-core laptop
        argv = ["train", "--preset", "d2l", "--data", DATA, "--max-steps", str(STEPS), "--no-progress"]
        assert main([*argv, "--out", str(tmp_path / "cli")]) == 0
    with intra_op_threads(3):
        train_model("transformer-d2l", "transformer", "d2l", {"max_steps": STEPS}, {}, DATA, tmp_path / "demo", 0)
    assert torch.get_num_threads() >= 1

    runs = [tmp_path / "inproc", tmp_path / "cli", tmp_path / "demo" / "transformer-d2l"]
    configs = [json.loads((r / "config.json").read_text()) for r in runs]
    for cfg in configs[1:]:
        for section in ("model", "train", "data"):
            assert cfg[section] == configs[0][section], section
    losses = [
        [e["loss"] for e in map(json.loads, (r / "log.jsonl").read_text().splitlines()) if e["event"] == "train"]
        for r in runs
    ]
    assert len(losses[0]) == STEPS // preset["train"]["log_every"]
    assert losses[1] == losses[0] and losses[2] == losses[0]
    weights = [load_file(str(r / "model.safetensors")) for r in runs]
    for other in weights[1:]:
        assert other.keys() == weights[0].keys()
        for name, tensor in weights[0].items():
            assert torch.equal(other[name], tensor), name


def test_thread_count_is_pinned_inside_and_restored_after():
    before = torch.get_num_threads()
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with intra_op_threads(None):  # None leaves it alone
        assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), intra_op_threads(1):
        raise RuntimeError("a failing run")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_train_config_rejects_a_bad_thread_count(bad):
    with pytest.raises(ValueError, match="threads"):
        TrainConfig.from_dict({"threads": bad})


def test_d2l_preset_pins_its_threads_and_others_use_every_core():
    from attnlab.training.presets import get_preset

    assert get_preset("transformer", "d2l")["train"]["threads"] == 1
    assert TrainConfig().threads is None
