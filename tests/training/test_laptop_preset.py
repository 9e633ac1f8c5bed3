"""The `laptop` preset trains from the corpus, and its time-to-quality benchmark runs end to end
(a few seconds on a slice of the corpus; the recorded 600 s runs are in BENCHMARKS.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.training.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]
CORPUS = os.environ.get("ATTNLAB_DATA")


@pytest.fixture
def corpus():
    if not (CORPUS and Path(CORPUS).is_file()):
        pytest.skip("set ATTNLAB_DATA to the shared fra-eng.zip")
    return CORPUS


def test_laptop_preset_is_a_joint_bpe_model_with_tied_embeddings():
    p = get_preset("transformer", "laptop")
    assert p["data"]["tokenizer"] == "bpe" and p["model"]["share_embeddings"] is True
    assert p["data"]["max_len"] >= 10 and p["train"]["time_budget"] == 600


def test_laptop_preset_trains_a_few_steps(tmp_path, corpus, capsys):
    out = tmp_path / "laptop"
    rc = main(
        [
            "train",
            "--preset",
            "laptop",
            "--data",
            corpus,
            "--num-examples",
            "3000",
            "--max-steps",
            "3",
            "--set",
            "train.eval_limit=20",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model"]["num_hiddens"] == 192 and cfg["model"]["share_embeddings"] is True
    assert cfg["model"]["src_vocab_size"] == cfg["model"]["tgt_vocab_size"]  # one joint vocabulary
    assert (out / "model.safetensors").is_file()


def test_time_to_quality_smoke(tmp_path, corpus):
    curves, run = tmp_path / "curves.json", tmp_path / "run"
    cmd = [
        sys.executable,
        "benchmarks/time_to_quality.py",
        "--budget",
        "2",  # both recipes train and are scored at two points: the script end to end, not their quality
        "--points",
        "1,2",
        "--num-examples",
        "3000",
        "--valid-limit",
        "20",
        "--json",
        str(curves),
        "--save",
        str(run),
        "--figure",
        str(tmp_path / "ttq.png"),
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "ATTNLAB_DATA": corpus}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CPU features:" in done.stdout
    results = json.loads(curves.read_text())
    assert [r["recipe"] for r in results] == ["laptop", "torch-tutorial"]
    for r in results:
        assert [p["seconds"] >= t for p, t in zip(r["curve"], (1, 2))] == [True, True]
        assert all(0 <= p["valid_bleu"] <= 100 for p in r["curve"])
    assert (tmp_path / "ttq.png").stat().st_size > 1000
    test = subprocess.run(
        [sys.executable, "benchmarks/time_to_quality.py", "--test-run", str(run)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ATTNLAB_DATA": corpus},
    )
    assert test.returncode == 0, test.stderr[-3000:]
    assert "distinct sources of 3-10 words" in test.stdout and "beam 4: BLEU" in test.stdout
