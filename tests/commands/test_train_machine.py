"""`attnlab train` sizes itself to the machine: threads from the cores free at start (or --threads), a header
line saying what trains how, and progress counted against a time budget rather than a step total."""

from __future__ import annotations

import io
import json

from attnlab.cli import main
from attnlab.data import sample_data_path
from attnlab.training.progress import Progress
from attnlab.training.trainer import Trainer
from attnlab.utils import runtime


def _train(tmp_path, name: str, *flags: str) -> None:
    argv = ["train", "--preset", "tiny", "--data", str(sample_data_path()), "--max-steps", "2"]
    assert main([*argv, "--time-budget", "30", "--out", str(tmp_path / name), "--no-progress", *flags]) == 0


def _threads(tmp_path, name: str) -> int:
    return json.loads((tmp_path / name / "config.json").read_text(encoding="utf-8"))["train"]["threads"]


def test_train_takes_the_free_cores_or_threads_and_says_so(capsys, tmp_path, monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(runtime, "load_now", lambda: 9.0)  # eight other runnable processes: every core taken
    fit = Trainer._fit

    def counting_fit(self):  # the threads torch trains on, read inside the loop's own call
        seen.append(torch.get_num_threads())
        return fit(self)

    monkeypatch.setattr(Trainer, "_fit", counting_fit)
    cores = runtime.usable_cores()
    _train(tmp_path, "busy")
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("train: data")]
    assert header == [
        f"train: data {sample_data_path()}, preset tiny, precision fp32 (asked for fp32), 1 of {cores} cores, "
        "budget 30 s"
    ]
    assert seen == [1] and _threads(tmp_path, "busy") is None  # config.json keeps what was asked: the free cores
    _train(tmp_path, "asked", "--threads", "3")
    assert seen == [1, 3] and _threads(tmp_path, "asked") == 3 and "3 of" in capsys.readouterr().out


def test_progress_counts_seconds_against_the_budget():
    now = [0.0]
    stream = io.StringIO()
    bar = Progress(total=152_500, stream=stream, every_s=5.0, clock=lambda: now[0], budget=20.0)
    for step in range(1, 101):
        now[0] += 0.125  # 12.5 s: lines at 5 s and 10 s, then the last state at close
        bar.update(step, loss="1.000")
    bar.close()
    assert stream.getvalue().splitlines() == [
        f"train: {s}/20 s step {n} loss 1.000" for s, n in ((5, 40), (10, 80), (12, 100))
    ]
