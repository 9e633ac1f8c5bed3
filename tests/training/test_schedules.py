"""Budgeted learning-rate schedules: 'linear' and 'cosine' warm up, then decay to zero exactly at the end of the
run (its time budget on the StopPolicy's clock, or max_steps); 'inverse_sqrt' and 'constant' are unchanged."""

from __future__ import annotations

import doctest
import itertools
import json
import math

import pytest
import torch
from train_helpers import DATA, needs_data, tiny_run, train_argv

import attnlab.training.optim as optim
import attnlab.training.trainer as trainer_module
from attnlab.cli import main
from attnlab.commands.train import SCHEDULES as CLI_SCHEDULES
from attnlab.training.config import SCHEDULES, TrainConfig
from attnlab.training.optim import learning_rate
from attnlab.training.stop import StopPolicy

pytestmark = pytest.mark.usefixtures("one_thread")

LR, WARMUP = 1e-3, 10


def _cfg(schedule: str, **kw) -> TrainConfig:
    return TrainConfig(**{"lr": LR, "warmup_steps": WARMUP, "schedule": schedule, "max_steps": 100, **kw})


def _decay(schedule: str, p: float) -> float:
    return 1 - p if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * p))


# --------------------------------------------------------------------------- the formula
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_budgeted_schedules_warm_up_then_decay_to_zero(schedule):
    cfg = _cfg(schedule)
    for step in range(1, WARMUP + 1):  # warm-up: linear to the peak, whatever the decay
        assert learning_rate(step, cfg, 0.0) == pytest.approx(LR * step / WARMUP, rel=1e-12)
    p = (WARMUP + 5) / 100
    assert learning_rate(WARMUP + 5, cfg, p) == pytest.approx(LR * _decay(schedule, p), rel=1e-12)
    assert learning_rate(50, cfg, 0.5) == pytest.approx(LR / 2, rel=1e-12)  # both are half-way at half the run
    assert learning_rate(100, cfg, 1.0) == 0.0
    assert learning_rate(3, cfg, 1.0) == 0.0  # the end of the run wins over warm-up
    assert learning_rate(100, cfg, 1.7) == 0.0 and learning_rate(1, cfg, -1.0) == LR / WARMUP  # clipped
    # Over a whole run (progress = updates done / max_steps): up to the peak, then strictly down, > 0 to the end.
    rates = [learning_rate(s, cfg, (s - 1) / 100) for s in range(1, 101)]
    peak = max(range(100), key=rates.__getitem__)
    assert peak in (WARMUP - 1, WARMUP)
    assert all(a > b for a, b in itertools.pairwise(rates[peak:]))
    assert all(a < b for a, b in itertools.pairwise(rates[: peak + 1]))
    assert rates[-1] > 0.0


def test_cosine_and_linear_differ_and_zero_warmup_starts_at_the_peak():
    assert learning_rate(40, _cfg("cosine"), 0.25) == pytest.approx(LR * (1 + math.cos(math.pi / 4)) / 2)
    assert learning_rate(40, _cfg("linear"), 0.25) == pytest.approx(LR * 0.75)
    assert learning_rate(1, _cfg("linear", warmup_steps=0), 0.0) == LR


@pytest.mark.parametrize("schedule", ["inverse_sqrt", "constant"])
def test_step_schedules_ignore_progress_and_keep_their_formula(schedule):
    cfg = _cfg(schedule)
    for step in (1, 5, 10, 11, 400, 10_000):
        expected = LR if schedule == "constant" else LR * min(step / WARMUP, math.sqrt(WARMUP / step))
        assert learning_rate(step, cfg) == expected  # bit for bit the formula as it always was
        assert learning_rate(step, cfg, 0.9) == expected


def test_the_docstring_example_holds():
    assert doctest.testmod(optim, verbose=False).failed == 0


# --------------------------------------------------------------------------- the config
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_a_budgeted_schedule_needs_an_end(schedule):
    expected = f"schedule '{schedule}' decays to zero at the end of the run: set time_budget or max_steps (got neither)"
    with pytest.raises(ValueError) as err:
        TrainConfig(schedule=schedule, device="cpu")
    assert str(err.value) == expected
    TrainConfig(schedule=schedule, max_steps=10, device="cpu")
    TrainConfig(schedule=schedule, time_budget=60.0, device="cpu")


def test_unknown_schedule_names_the_choices_and_the_cli_offers_them_all():
    with pytest.raises(ValueError, match="schedule must be one of 'inverse_sqrt', 'constant', 'linear', 'cosine'"):
        TrainConfig(schedule="step", device="cpu")
    assert CLI_SCHEDULES == SCHEDULES


def test_the_cli_refuses_a_budgeted_schedule_without_an_end_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"  # the tiny preset sets neither max_steps nor time_budget
    argv = ["train", "--preset", "tiny", "--schedule", "linear", "--out", str(out), "--data", str(DATA or "x.zip")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "schedule 'linear' decays to zero at the end of the run" in err
    assert not out.exists()
    assert main([*argv[:3], *argv[-2:], "--print-config", "--set", "train.schedule=cosine", "--max-steps", "9"]) == 0
    printed = json.loads(capsys.readouterr().out)["train"]
    assert printed["schedule"] == "cosine" and printed["max_steps"] == 9


# --------------------------------------------------------------------------- progress, on the stop policy's clock
def test_progress_is_the_larger_fraction_of_steps_and_seconds():
    now = [100.0]
    both = StopPolicy(TrainConfig(max_steps=100, time_budget=10.0, device="cpu"), clock=lambda: now[0])
    both.restart()
    assert both.progress(20) == pytest.approx(0.2)  # no time spent: the steps govern
    now[0] = 105.0
    assert both.progress(20) == pytest.approx(0.5)  # half the budget: the clock governs
    assert both.progress(80) == pytest.approx(0.8)
    now[0] = 250.0
    assert both.progress(0) == 1.0  # never past the end
    seconds = StopPolicy(TrainConfig(time_budget=4.0, device="cpu"), clock=lambda: now[0])
    seconds.restart()
    now[0] = 251.0
    assert seconds.progress(10_000) == pytest.approx(0.25)
    steps = StopPolicy(TrainConfig(max_steps=8, device="cpu"), clock=lambda: now[0])
    assert steps.progress(2) == 0.25 and steps.progress(8) == 1.0
    assert StopPolicy(TrainConfig(device="cpu")).progress(5) == 0.0


def test_ranks_agree_on_progress(monkeypatch):
    # Another rank's clock is ahead: every rank takes the furthest, so all set the same lr.
    calls = []

    def all_reduce(t, op=None):
        calls.append(op)
        t.copy_(torch.maximum(t, torch.tensor([0.9], dtype=t.dtype)))

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    now = [0.0]
    policy = StopPolicy(TrainConfig(time_budget=10.0, device="cpu"), world_size=2, clock=lambda: now[0])
    now[0] = 3.0
    assert policy.progress(1) == pytest.approx(0.9)
    assert calls == [torch.distributed.ReduceOp.MAX]


class _TickingPolicy(StopPolicy):
    """A StopPolicy whose clock moves 1 s per optimizer update (checked after each)."""

    def __init__(self, cfg, device="cpu", world_size=1):
        self.now = 1000.0
        super().__init__(cfg, device, world_size, clock=lambda: self.now)

    def after_step(self, step, epoch):
        self.now += 1.0
        return super().after_step(step, epoch)


def _train_events(run):
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    return {e["step"]: e for e in events if e["event"] == "train"}  # the latest line per step (a resume repeats)


@needs_data
@pytest.mark.parametrize("max_steps", [None, 100])
def test_a_timed_run_decays_to_zero_at_its_deadline(tmp_path, monkeypatch, max_steps):
    monkeypatch.setattr(trainer_module, "StopPolicy", _TickingPolicy)
    result = tiny_run(
        tmp_path / "run", max_steps=max_steps, epochs=1000, time_budget=5.0, schedule="linear", warmup_steps=2
    )
    assert result.stop_reason == "time_budget" and result.step == 5
    lrs = {s: e["lr"] for s, e in _train_events(tmp_path / "run").items()}
    lr = 5e-3  # the tiny preset's
    # update k sees k-1 seconds spent of 5; the sixth, at the deadline, would get 0 (the run ends instead)
    expected = {k: lr * min(1.0, k / 2) * (1 - (k - 1) / 5) for k in range(1, 6)}
    assert lrs == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------- resume
class _Crash(Exception):
    pass


@needs_data
def test_a_step_limited_run_resumes_on_the_same_rates_and_weights(tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    args = ("--seed", "7", "--checkpoint-every", "3", "--warmup-steps", "2")
    assert main(train_argv(tmp_path / "full", *args, "--schedule", "cosine", steps=8)) == 0
    after_step = StopPolicy.after_step

    def crash_at_5(self, step, epoch):
        if step == 5:
            raise _Crash
        return after_step(self, step, epoch)

    monkeypatch.setattr(StopPolicy, "after_step", crash_at_5)
    with pytest.raises(_Crash):  # killed after step 5: its newest checkpoint is step 3's
        main(train_argv(tmp_path / "crashed", *args, "--set", "train.schedule=cosine", steps=8))
    monkeypatch.setattr(StopPolicy, "after_step", after_step)
    assert main(["train", "--resume", str(tmp_path / "crashed"), "--no-progress"]) == 0
    full, resumed = _train_events(tmp_path / "full"), _train_events(tmp_path / "crashed")
    assert sorted(full) == sorted(resumed) == list(range(1, 9))
    assert [full[s]["lr"] for s in full] == [resumed[s]["lr"] for s in full]
    assert full[8]["lr"] == pytest.approx(5e-3 * 0.5 * (1 + math.cos(math.pi * 7 / 8)), rel=1e-12)
    a, b = load_file(tmp_path / "full" / "model.safetensors"), load_file(tmp_path / "crashed" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    config = json.loads((tmp_path / "crashed" / "config.json").read_text())
    assert config["train"]["schedule"] == "cosine"
