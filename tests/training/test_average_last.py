"""`TrainConfig.average_last`: a finished run's final weights are the mean of its final weights and its newest
K-1 checkpoints; the final checkpoint keeps the weights as trained (and `--resume` continues from them); the
final scores are the averaged model's; fewer checkpoints than asked are averaged and said, never a failure."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from train_helpers import needs_data, tiny_run

from attnlab.runs.checkpoints import list_checkpoints, save_checkpoint
from attnlab.runs.weights import save_weights
from attnlab.training.averaging import install_average, plan_average
from attnlab.training.config import TrainConfig
from attnlab.training.stop import StopPolicy

pytestmark = pytest.mark.usefixtures("one_thread")


def _mean(files):
    """The element-wise mean of safetensors files, as averaging should compute it (float64, then cast)."""
    tensors = [load_file(f) for f in files]
    return {k: (sum(t[k].double() for t in tensors) / len(tensors)).to(tensors[0][k].dtype) for k in tensors[0]}


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _events(run, kind):
    return [e for e in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if e["event"] == kind]


# --------------------------------------------------------------------------- the config
def test_keep_last_must_hold_what_average_last_averages():
    with pytest.raises(ValueError) as err:
        TrainConfig(average_last=5, keep_last=3, device="cpu")
    assert str(err.value) == (
        "average_last=5 averages the final weights with the 4 newest checkpoints before them, but keep_last=3 "
        "keeps fewer; set keep_last to at least 4"
    )
    with pytest.raises(ValueError, match="average_last must be 0 \\(off\\) or at least 2"):
        TrainConfig(average_last=1, device="cpu")
    with pytest.raises(ValueError, match="average_last"):
        TrainConfig(average_last=-2, device="cpu")
    assert TrainConfig(average_last=5, keep_last=4, device="cpu").average_last == 5
    assert TrainConfig(device="cpu").average_last == 0  # off unless asked for


# --------------------------------------------------------------------------- choosing and averaging, on a tiny model
def _run_with_checkpoints(tmp_path, steps=(1, 2, 3), final=4):
    """A run folder with a checkpoint of an nn.Linear at each of `steps`, and its final weights at `final`."""
    run = tmp_path / "run"
    model = nn.Linear(3, 2)
    for step in (*steps, final):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(step))
                p.mul_(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape) + 1)
        if step == final:
            save_weights(model, run / "model.safetensors")
        else:
            save_checkpoint(run, step, model, {"step": step}, {"step": step})
    return run, model


def test_plan_averages_the_final_weights_with_the_newest_checkpoints_before_them(tmp_path):
    run, model = _run_with_checkpoints(tmp_path)
    plan = plan_average(run, 4, 3)
    assert plan.event == {"event": "average", "step": 4, "asked": 3, "steps": [2, 3, 4]}
    ckpts = {int(p.name[5:]): p / "model.safetensors" for p in list_checkpoints(run)}
    expected = _mean([ckpts[2], ckpts[3], run / "model.safetensors"])
    _assert_same(plan.tensors, expected)
    assert torch.allclose(expected["weight"], model.weight.detach() * 3 / 4)  # (2 + 3 + 4) / 3 of step 4's
    install_average(run, model, plan)
    _assert_same(load_file(run / "model.safetensors"), expected)  # what load_translator reads...
    _assert_same(dict(model.state_dict()), expected)  # ...and what the trainer evaluates last


def test_fewer_or_damaged_checkpoints_are_averaged_as_they_are_and_said(tmp_path):
    run, _ = _run_with_checkpoints(tmp_path)
    plan = plan_average(run, 4, 6)
    assert plan.averaged and plan.event["steps"] == [1, 2, 3, 4]
    assert "averaged 4 of the 6 asked for: the run kept 3 intact checkpoint(s) before step 4" in plan.event["note"]
    victim = list_checkpoints(run)[-1] / "model.safetensors"  # step 3's, cut short
    victim.write_bytes(victim.read_bytes()[:10])
    plan = plan_average(run, 4, 3)
    assert plan.event["steps"] == [1, 2, 4]
    assert plan.event["note"].startswith("skipped damaged step_0000003: model.safetensors has 10 bytes")


def test_nothing_to_average_with_leaves_the_final_weights(tmp_path):
    run, model = _run_with_checkpoints(tmp_path, steps=())
    before = load_file(run / "model.safetensors")
    plan = plan_average(run, 4, 3)
    assert not plan.averaged and plan.event["steps"] == [4]
    assert "averaged 1 of the 3 asked for: the run kept 0 intact checkpoint(s)" in plan.event["note"]
    install_average(run, model, plan)
    _assert_same(load_file(run / "model.safetensors"), before)
    assert "no run folder" in plan_average(None, 4, 3).event["note"]


def test_checkpoints_at_or_after_the_final_step_are_not_earlier_ones(tmp_path):
    run, _ = _run_with_checkpoints(tmp_path, steps=(2, 4))  # step 4: saved by a signal, then resumed to no step
    assert plan_average(run, 4, 3).event["steps"] == [2, 4]


# --------------------------------------------------------------------------- whole runs
@needs_data
def test_a_finished_run_loads_and_scores_the_average(tmp_path):
    from attnlab.models import build_model
    from attnlab.runs.config import read_run_config
    from attnlab.runs.weights import load_weights
    from attnlab.training.tasks import task_for
    from attnlab.training.trainer import Trainer

    run = tmp_path / "run"
    result = tiny_run(run, max_steps=8, epochs=1000, checkpoint_every=2, keep_last=2, keep_best=0, average_last=3)
    assert result.stop_reason == "max_steps" and result.exit_code == 0
    assert result.average == {"event": "average", "step": 8, "asked": 3, "steps": [4, 6, 8]}
    kept = [p.name for p in list_checkpoints(run)]
    assert kept == ["step_0000006", "step_0000008"]  # pruned after averaging: keep_last=2 held steps 4 and 6
    (event,) = _events(run, "average")
    assert event["steps"] == [4, 6, 8] and "note" not in event
    # The final checkpoint is the weights as trained; model.safetensors is not them.
    final_ckpt = load_file(run / "checkpoints" / "step_0000008" / "model.safetensors")
    averaged = load_file(run / "model.safetensors")
    assert any(not torch.equal(final_ckpt[k], averaged[k]) for k in averaged)
    # The reported and last logged scores are those of the weights a user loads.
    evals = _events(run, "eval")
    assert [e["step"] for e in evals] == [8, 8] and evals[-1]["weights"] == "averaged" and "weights" not in evals[0]
    assert result.scores == {k: v for k, v in evals[-1].items() if k.startswith("valid_")}
    assert evals[0]["valid_loss"] != evals[-1]["valid_loss"]
    cfg = read_run_config(run)
    task = task_for(cfg["model_type"])
    model = build_model(cfg["model_type"], cfg["model"])
    load_weights(model, run / "model.safetensors")
    trainer = Trainer(model, task.load(cfg["data"]), TrainConfig.from_dict(cfg["train"]), None, progress=False)
    assert trainer.evaluate() == result.scores


@needs_data
def test_the_average_is_of_the_named_checkpoints_and_resume_continues_the_trajectory(tmp_path):
    from attnlab.training.launch import resume_run

    a, b = tmp_path / "a", tmp_path / "b"
    tiny_run(a, max_steps=6, epochs=1000, checkpoint_every=2, keep_last=5, average_last=3)
    # Step 4's and 6's checkpoints hold the weights as trained, step 6's being the final ones.
    ckpt = {p.name: p / "model.safetensors" for p in list_checkpoints(a)}
    final_before = load_file(ckpt["step_0000006"])
    _assert_same(
        load_file(a / "model.safetensors"), _mean([ckpt["step_0000002"], ckpt["step_0000004"], ckpt["step_0000006"]])
    )
    resumed = resume_run(a, {"max_steps": 10}, progress=False)
    assert resumed.step == 10
    assert [e["from"] for e in _events(a, "resume")] == ["step_0000006"]
    _assert_same(load_file(a / "checkpoints" / "step_0000006" / "model.safetensors"), final_before)
    # The resumed run went on from the weights as trained, not from their average: it matches a run never stopped.
    tiny_run(b, max_steps=10, epochs=1000, checkpoint_every=2, keep_last=5)
    _assert_same(
        load_file(a / "checkpoints" / "step_0000010" / "model.safetensors"),
        load_file(b / "checkpoints" / "step_0000010" / "model.safetensors"),
    )
    assert _events(a, "average")[-1]["steps"] == [6, 8, 10]


@needs_data
def test_the_cli_flag_checks_keep_last_and_reports_the_average(tmp_path, capsys):
    from train_helpers import train_argv

    from attnlab.cli import main

    bad = train_argv(tmp_path / "bad", "--average-last", "4", "--keep-last", "2", steps=4)
    assert main(bad) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "set keep_last to at least 3" in err and not (tmp_path / "bad").exists()
    assert main(train_argv(tmp_path / "ok", "--average-last", "2", "--checkpoint-every", "2", steps=4)) == 0
    assert "final weights: the average of steps 2, 4\n" in capsys.readouterr().out


@needs_data
def test_a_failing_evaluation_of_the_average_never_costs_the_averaged_weights(tmp_path, monkeypatch):
    from attnlab.training.trainer import Trainer

    evaluate, calls = Trainer.evaluate, []

    def second_fails(self, examples=None):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("decoding blew up")
        return evaluate(self, examples)

    monkeypatch.setattr(Trainer, "evaluate", second_fails)
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="decoding blew up"):
        tiny_run(run, max_steps=4, epochs=1000, checkpoint_every=2, average_last=2)
    ckpts = {p.name: p / "model.safetensors" for p in list_checkpoints(run)}
    _assert_same(load_file(run / "model.safetensors"), _mean([ckpts["step_0000002"], ckpts["step_0000004"]]))
    assert _events(run, "average")[0]["steps"] == [2, 4]


@needs_data
def test_an_interrupted_run_is_not_averaged(tmp_path, monkeypatch):
    after_step = StopPolicy.after_step

    def interrupt_at_3(self, step, epoch):
        if step == 3:
            self.signum = 2  # as SIGINT's handler records it
        return after_step(self, step, epoch)

    monkeypatch.setattr(StopPolicy, "after_step", interrupt_at_3)
    run = tmp_path / "run"
    result = tiny_run(run, max_steps=8, epochs=1000, checkpoint_every=1, average_last=2)
    assert result.stop_reason == "signal" and result.average is None
    assert not _events(run, "average") and not (run / "model.safetensors").exists()
