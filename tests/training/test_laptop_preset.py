"""The `laptop` preset trains from the corpus in the fastest precision the CPU has, and says which (a few
steps on a slice of the corpus; its 600 s runs are benchmarks/quality/time_to_quality.py's)."""

import json
import os
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


@pytest.mark.parametrize(
    "flags, picked",
    [({"avx2", "avx512_bf16"}, "bf16"), ({"avx2", "fma"}, "fp32")],
    ids=["bf16-units", "no-bf16-units"],
)
def test_laptop_preset_trains_a_few_steps(tmp_path, corpus, capsys, monkeypatch, flags, picked):
    # A CPU without bf16 units runs the same recipe in fp32, and the run says what `auto` picked.
    monkeypatch.setattr("attnlab.inference.precision.cpu_features", lambda: flags)
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
    assert cfg["precision"]["asked"] == "auto" and cfg["precision"]["picked"] == picked
    assert cfg["train"]["schedule"] == "linear" and cfg["train"]["average_last"] == 3
