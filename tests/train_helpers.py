"""Tiny training runs shared by the train / checkpoint / command tests (seconds on 2 CPU cores)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = os.environ.get("ATTNLAB_DATA")
needs_data = pytest.mark.skipif(
    not DATA or not Path(DATA).is_file(), reason="set ATTNLAB_DATA to the fra-eng.zip corpus to run training tests"
)

# The bundled sample split for head analyses: a fifth held out for validation, a tenth for test.
SAMPLE_SPLIT = {"loader": "translation", "min_freq": 1, "valid_fraction": 0.2, "test_fraction": 0.1, "use_cache": False}


def sample_split() -> dict:
    """SAMPLE_SPLIT on the sample corpus that ships with attnlab."""
    from attnlab.data import sample_data_path

    return {**SAMPLE_SPLIT, "path": str(sample_data_path())}


def sample_transformer(data):
    """The head analyses' tiny Transformer (2 layers, 4 heads, D 16) for a loaded `sample_split()`, seed 0."""
    import torch

    from attnlab.models import Transformer, TransformerConfig

    torch.manual_seed(0)
    cfg = TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), 16, 4, 2, 32, dropout=0.0, max_len=64)
    return Transformer(cfg).eval()


def save_sample_run(run, model, data):
    """`model` as an attnlab run at `run` (config.json with `sample_split()`, vocabularies, weights)."""
    from attnlab.runs.config import write_run_config
    from attnlab.runs.weights import save_weights

    write_run_config(
        run,
        "transformer",
        model.config.to_dict(),
        {},
        sample_split(),
        src_vocab=data.src_vocab,
        tgt_vocab=data.tgt_vocab,
    )
    save_weights(model, run / "model.safetensors")
    return run


# Subprocesses (`python -m attnlab train ...`) get the same through the environment.
SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", **({"ATTNLAB_DATA": DATA} if DATA else {})}


def tiny_run(run_dir, model_type: str = "transformer", progress: bool = False, **train_overrides):
    """Train the `tiny` preset for a few steps into run_dir; returns the TrainResult."""
    from attnlab.training.config import TrainConfig
    from attnlab.training.launch import train_run
    from attnlab.training.presets import get_preset

    preset = get_preset(model_type, "tiny")
    cfg = TrainConfig.from_dict({**preset["train"], "max_steps": 4, **train_overrides})
    return train_run(model_type, preset["model"], cfg, {**preset["data"], "path": DATA}, run_dir, progress=progress)


def train_argv(out, *extra: str, model: str = "transformer", steps: int = 6) -> list[str]:
    """`attnlab train` arguments: the tiny preset of `model` on DATA for `steps` updates into `out`,
    no progress bar, then `extra`."""
    flags = f"train --model {model} --preset tiny --max-steps {steps} --no-progress".split()
    return [*flags, "--out", str(out), "--data", str(DATA), *extra]
