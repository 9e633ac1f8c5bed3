"""`attnlab train --model vit`, `evaluate` (accuracy), `attention --image N`, and what other commands say."""

from __future__ import annotations

import re

import pytest

from attnlab.cli import main

pytest.importorskip("sklearn")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("vit") / "run"
    assert main(["train", "--model", "vit", "--preset", "tiny", "--out", str(out), "--no-progress"]) == 0
    return out


def test_tiny_vit_beats_chance_clearly_on_the_test_split(vit_run, capsys):
    assert main(["evaluate", "--checkpoint", str(vit_run), "--split", "test"]) == 0
    out = capsys.readouterr().out
    accuracy = float(re.search(r"^accuracy (0\.\d{3})$", out, re.M).group(1))
    assert accuracy > 0.5  # chance is 0.1 on ten digits


def test_attention_draws_rollout_and_class_token_maps(vit_run, tmp_path, capsys):
    out = tmp_path / "maps"
    assert main(["attention", "--checkpoint", str(vit_run), "--image", "3", "--out", str(out), "--format", "png"]) == 0
    assert sorted(p.name for p in out.glob("*.png")) == ["class_token_heads.png", "rollout.png"]
    assert "test image 3: predicted" in capsys.readouterr().out
    assert main(["attention", "--checkpoint", str(vit_run), "--image", "3", "--out", str(out)]) == 2  # guarded
    assert "--force" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["translate", "--checkpoint", "{run}", "go ."], "is a vit run, not a translator"),
        (["attention", "--checkpoint", "{run}", "go ."], "pass --image N"),
        (["attention", "--checkpoint", "{run}", "--image", "100000"], "--image must be between 0 and"),
        (["train", "--model", "vit", "--set", "model.patch_size=3", "--out", "{tmp}"], "patch size 3 does not divide"),
        (["train", "--model", "vit", "--max-len", "5", "--out", "{tmp}"], "--max-len: not for image runs"),
        (["train", "--model", "vit", "--nproc", "2", "--out", "{tmp}"], "a vit run trains in one process"),
    ],
)
def test_bad_input_is_one_line_exit_2(vit_run, tmp_path, capsys, argv, message):
    argv = [a.format(run=vit_run, tmp=tmp_path / "new") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "new").exists()


def test_a_vit_run_is_a_run_like_a_translators(vit_run, tmp_path, capsys):
    """Trained by the one Trainer: checkpoints, a finished run that resumes to nothing, more epochs on resume."""
    import json

    from attnlab.runs.checkpoints import list_checkpoints

    assert list_checkpoints(vit_run), "the Trainer's final checkpoint"
    events = [json.loads(line) for line in (vit_run / "log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "eval" and 0.0 <= e["valid_accuracy"] <= 1.0 for e in events)
    capsys.readouterr()
    assert main(["train", "--resume", str(vit_run)]) == 0
    assert "training already finished" in capsys.readouterr().out
    out = tmp_path / "short"
    argv = ["train", "--model", "vit", "--preset", "tiny", "--epochs", "1", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    steps = int(re.search(r"after (\d+) steps \(1 epochs", capsys.readouterr().out).group(1))
    assert main(["train", "--resume", str(out), "--epochs", "2", "--no-progress"]) == 0
    assert f"after {2 * steps} steps (2 epochs" in capsys.readouterr().out


def test_images_of_different_sizes_are_refused_before_training(tmp_path, capsys):
    from PIL import Image

    for cls, size in (("a", (8, 8)), ("b", (6, 8))):
        (tmp_path / "img" / cls).mkdir(parents=True)
        Image.new("L", size).save(tmp_path / "img" / cls / "1.png")
    argv = ["train", "--model", "vit", "--data", str(tmp_path / "img"), "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    assert "images of different sizes" in capsys.readouterr().err


def test_print_config_and_config_file_train_the_same_vit(vit_run, tmp_path, capsys):
    import json

    capsys.readouterr()
    assert main(["train", "--model", "vit", "--preset", "tiny", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["model_type"] == "vit" and printed["data"] == {"loader": "digits"}
    assert printed["model"]["patch_size"] == 2 and "warmup_steps" in printed["train"]
    path = tmp_path / "vit.json"
    path.write_text(json.dumps(printed), encoding="utf-8")
    out = tmp_path / "from-file"
    assert main(["train", "--config", str(path), "--out", str(out), "--no-progress"]) == 0
    saved, direct = (json.loads((d / "config.json").read_text()) for d in (out, vit_run))
    assert saved["model"] == direct["model"] and saved["train"] == direct["train"]
    bad = {**printed, "model": {**printed["model"], "patch_size": 3}}
    path.write_text(json.dumps(bad), encoding="utf-8")
    assert main(["train", "--config", str(path), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "patch" in err and err.count("\n") == 1
