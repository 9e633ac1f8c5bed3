"""The training step reads nothing from the device per step: losses are read every log_every steps, a non-finite
one stops the run with the weights of the last finite step, and torch.compile trains as eager does."""

from __future__ import annotations

import json
import os

import pytest
import torch

from attnlab.data import load_data
from attnlab.data.corpus import sample_data_path
from attnlab.models import build_model
from attnlab.training import trainer as trainer_module
from attnlab.training.config import TrainConfig
from attnlab.training.presets import get_preset
from attnlab.training.progress import LossWindow
from attnlab.training.trainer import Trainer
from attnlab.utils.runtime import seed_everything


@pytest.fixture(scope="module")
def sample():
    preset = get_preset("transformer", "tiny")
    data = load_data({**preset["data"], "path": str(sample_data_path()), "num_examples": None})
    model = {**preset["model"], "src_vocab_size": len(data.src_vocab), "tgt_vocab_size": len(data.tgt_vocab)}
    return preset, data, model


def _trainer(sample, run_dir=None, **train) -> Trainer:
    preset, data, model = sample
    seed_everything(0)
    cfg = {**preset["train"], "batch_tokens": 64, "eval_limit": 1, "device": "cpu", "threads": 1, **train}
    return Trainer(build_model("transformer", model), data, TrainConfig.from_dict(cfg), run_dir, progress=False)


def test_losses_read_every_log_every_steps_are_those_read_every_step(sample, tmp_path):
    every = _trainer(sample, max_steps=8, log_every=1).fit()
    (tmp_path / "run").mkdir()
    trainer = _trainer(sample, tmp_path / "run", max_steps=8, log_every=3)
    tokens, step = [], trainer.train_step
    trainer.train_step = lambda batches: (out := step(batches), tokens.append(out[1]))[0]  # type: ignore[method-assign]
    deferred = trainer.fit()
    assert deferred.losses == every.losses and len(every.losses) == 8
    assert deferred.step == 8 and trainer.state.tokens_seen == sum(tokens)
    events = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    logged = [(e["step"], e["loss"]) for e in events if e["event"] == "train"]
    assert [s for s, _ in logged] == [3, 6]
    for at, loss in logged:  # each window's token-weighted mean, from the per-step run's losses
        window = LossWindow()
        for i in range(at - 3, at):
            window.add(every.losses[i], tokens[i])
        assert loss == window.take()


def test_a_non_finite_loss_read_late_leaves_the_last_finite_weights(sample, monkeypatch):
    reference = _trainer(sample, max_steps=3, log_every=1)
    reference.fit()
    trainer = _trainer(sample, max_steps=8, log_every=5)
    calls = {"n": 0}
    loss = trainer.task.loss

    def poisoned(model, batch, smoothing):
        calls["n"] += 1
        out = loss(model, batch, smoothing)
        return out * float("nan") if calls["n"] == 4 else out  # the 4th step's loss is NaN

    monkeypatch.setattr(trainer.task, "loss", poisoned)
    result = trainer.fit()
    assert result.stop_reason == "non_finite_loss" and result.exit_code == 1
    assert result.step == 3 and len(result.losses) == 3 and calls["n"] == 5  # read at step 5, not step 4
    for name, value in reference.model.state_dict().items():  # steps 4 and 5 changed nothing
        assert torch.equal(trainer.model.state_dict()[name], value), name


def _compiled_equals_eager(sample):
    # The book's fixed shapes: one graph, compiled once (each new shape would compile again).
    shape = {"max_steps": 20, "log_every": 20, "epochs": 100, "batch_tokens": None, "batch_size": 8, "num_steps": 8}
    ref = _trainer(sample, **shape).fit()
    compiled = _trainer(sample, **shape, compile=True)
    out = compiled.fit()
    assert compiled.forward_model is not compiled.model  # the compiled wrapper ran the steps
    assert len(out.losses) == 20
    assert out.losses == pytest.approx(ref.losses, abs=1e-4)


INDUCTOR = pytest.param(
    "inductor",
    marks=pytest.mark.skipif(
        not os.environ.get("ATTNLAB_COMPILE_TESTS"),
        reason="inductor-compile: set ATTNLAB_COMPILE_TESTS=1 to run it (about 5 minutes on 2 cores)",
    ),
)


@pytest.mark.parametrize("backend", ["aot_eager", INDUCTOR])
def test_compiled_model_trains_as_eager(sample, monkeypatch, backend):
    """torch.compile trains as eager: 20 steps' losses agree to 1e-4. 'aot_eager' checks the graph capture and
    AOT autograd (about 20 s on 2 cores: in the suite), 'inductor' (what `--compile` runs) its generated kernels
    too (about 5 minutes of compiling: opt-in)."""
    monkeypatch.setattr(trainer_module, "COMPILE_BACKEND", backend)
    _compiled_equals_eager(sample)
