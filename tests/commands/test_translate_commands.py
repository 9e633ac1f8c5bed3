"""`attnlab train / translate / evaluate / average / attention` on a tiny trained run."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from attnlab.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for train_helpers
from train_helpers import needs_data, train_argv

pytestmark = [needs_data, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("cmd") / "run"
    code = main(train_argv(out, "--checkpoint-every", "2"))
    assert code == 0
    return out


def test_train_prints_loss_and_location(run_dir, capsys):
    # The module fixture trained already; train again into a fresh folder to see the output.
    out = run_dir.parent / "again"
    assert main(train_argv(out, steps=2)) == 0
    text = capsys.readouterr().out
    assert "final training loss" in text and "after 2 steps" in text
    assert f"saved the model to {out / 'model.safetensors'}" in text
    # Training into a folder that holds a run is refused, with the way out.
    assert main(train_argv(out, steps=2)) == 2
    assert "--resume" in capsys.readouterr().err


def test_translate_from_args_and_stdin(run_dir, capsys, monkeypatch):
    assert main(["translate", "--checkpoint", str(run_dir), "go .", "i'm home ."]) == 0
    from_args = capsys.readouterr().out.splitlines()
    assert len(from_args) == 2
    monkeypatch.setattr(sys, "stdin", io.StringIO("go .\n\ni'm home .\n"))
    assert main(["translate", "--checkpoint", str(run_dir)]) == 0
    from_stdin = capsys.readouterr().out.splitlines()
    assert from_stdin == [from_args[0], "", from_args[1]]  # blank line in, blank line out
    assert main(["translate", "--checkpoint", str(run_dir), "--beam", "3", "go ."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_translate_errors(run_dir, tmp_path, capsys):
    assert main(["translate", "--checkpoint", str(tmp_path / "none"), "go ."]) == 2
    assert "attnlab demo" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(run_dir), " ".join("abcdefghijklmnopqrst")]) == 2
    assert "max_len" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(run_dir), "--truncate", " ".join("abcdefghijklmnopqrst")]) == 0


def test_evaluate_prints_bleu_chrf_and_speed(run_dir, capsys):
    assert main(["evaluate", "--checkpoint", str(run_dir), "--split", "test", "--beam", "2", "--limit", "10"]) == 0
    text = capsys.readouterr().out
    assert "test split, 10 distinct sources (" in text and "pairs), beam 2" in text
    assert "BLEU " in text and "chrF " in text
    for bucket in ("1-4:", "5-7:", "8-10:", "11+:"):  # scores by source length
        assert bucket in text
    assert text.count(", bleu ") == 4  # the book's four sentences
    assert "tokens/s" in text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["translate", "--beam", "100000", "go ."], "--beam must be an integer >= 1 and <= 16, got 100000"),
        (["translate", "--beam", "0", "go ."], "--beam must be an integer >= 1 and <= 16, got 0"),
        (["evaluate", "--beam", "17"], "--beam must be an integer >= 1 and <= 16, got 17"),
        (["evaluate", "--limit", "-1"], "--limit must be an integer >= 1, got -1"),
        (["evaluate", "--limit", "0"], "--limit must be an integer >= 1, got 0"),
        (["average", "--last", "0"], "--last must be an integer >= 1, got 0"),
    ],
)
def test_unbounded_flags_are_refused_with_the_range(argv, message, run_dir, capsys):
    """Each out-of-range value is one line naming the allowed range, exit 2."""
    assert main([*argv, "--checkpoint", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_average_command(run_dir, tmp_path, capsys):
    out = tmp_path / "avg.safetensors"
    assert main(["average", "--checkpoint", str(run_dir), "--last", "2", "--out", str(out)]) == 0
    assert out.is_file() and "averaged 2 checkpoints" in capsys.readouterr().out
    assert main(["translate", "--checkpoint", str(run_dir), "--weights", str(out), "go ."]) == 0
    assert main(["average", "--checkpoint", str(run_dir), "--last", "99"]) == 2
    assert "has 3 checkpoint(s)" in capsys.readouterr().err


@pytest.mark.parametrize("model_type", ["transformer", "bahdanau"])
def test_attention_command_saves_heatmaps(model_type, run_dir, tmp_path, capsys):
    if model_type == "transformer":
        src = run_dir
        expected = {"encoder_self_attention.png", "decoder_self_attention.png", "encoder_decoder_attention.png"}
    else:
        src = tmp_path / "bahdanau"
        assert main(train_argv(src, model="bahdanau", steps=2)) == 0
        expected = {"decoder_attention.png"}
    out = tmp_path / "maps"
    assert main(["attention", "--checkpoint", str(src), "i'm home .", "--out", str(out), "--format", "png"]) == 0
    assert {p.name for p in out.iterdir()} == expected | {"attnlab-output.json"}
    assert "i'm home . =>" in capsys.readouterr().out
