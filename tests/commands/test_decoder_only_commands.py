"""`attnlab train --model decoder-only` and the commands that take its runs (and those that refuse them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from attnlab.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for train_helpers
from train_helpers import needs_data, train_argv

pytestmark = [needs_data, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("do") / "run"
    assert main(train_argv(out, "--set", "model.prefix_lm=true", model="decoder-only", steps=8)) == 0
    return out


def test_its_run_translates_evaluates_and_draws(run_dir, tmp_path, capsys):
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["model_type"] == "decoder-only" and cfg["model"]["prefix_lm"] is True
    assert cfg["model"]["num_layers"] == 2  # the tiny Transformer's 1 + 1 blocks in one stack
    assert main(["translate", "--checkpoint", str(run_dir), "--beam", "2", "go .", "i'm home ."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["evaluate", "--checkpoint", str(run_dir), "--split", "test", "--limit", "5", "--beam", "1"]) == 0
    assert "BLEU" in capsys.readouterr().out
    out = tmp_path / "maps"
    assert main(["attention", "--checkpoint", str(run_dir), "i'm home .", "--out", str(out), "--format", "png"]) == 0
    names = sorted(p.stem for p in out.glob("*.png"))
    assert names == ["decoder_self_attention", "encoder_decoder_attention", "encoder_self_attention"]


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--checkpoint", "{run}", "--format", "hf", "--out", "{tmp}"],
        ["heads", "--checkpoint", "{run}", "--out", "{tmp}"],
    ],
)
def test_commands_that_cannot_take_it_refuse_in_one_line(run_dir, tmp_path, capsys, argv):
    argv = [a.format(run=run_dir, tmp=tmp_path / "out") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "does not take decoder-only runs" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
