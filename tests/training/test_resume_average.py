"""A run killed between its final checkpoint and its final averaging: `--resume` finishes the averaging
(the final weights become the mean the run would have written), and a finished one is left alone."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from attnlab.data import sample_data_path
from attnlab.training.config import TrainConfig
from attnlab.training.launch import resume_run, train_run
from attnlab.training.presets import get_preset


def test_resume_finishes_an_interrupted_final_average(tmp_path):
    preset = get_preset("transformer", "tiny")
    fast = {"max_steps": 4, "epochs": 100, "schedule": "constant", "lr": 1e-2, "eval_limit": 2,
            "checkpoint_every": 2, "average_last": 2}  # fmt: skip
    cfg = TrainConfig.from_dict({**preset["train"], **fast})
    run = tmp_path / "run"
    data = {**preset["data"], "path": str(sample_data_path())}
    train_run("transformer", {**preset["model"], "num_layers": 1}, cfg, data, run, progress=False)
    ckpts = sorted((run / "checkpoints").iterdir())
    final, earlier = ckpts[-1], ckpts[-2]
    # The mean computed here from the two checkpoints' files: what the run's final weights must be.
    a, b = load_file(earlier / "model.safetensors"), load_file(final / "model.safetensors")
    mean = {k: ((a[k].double() + b[k].double()) / 2).to(a[k].dtype) for k in a}
    assert all(torch.equal(load_file(run / "model.safetensors")[k], mean[k]) for k in mean)

    # What `kill -9` after the final checkpoint leaves: the weights as trained, no 'average' event.
    (run / "model.safetensors").write_bytes((final / "model.safetensors").read_bytes())
    log = (run / "log.jsonl").read_text().splitlines()
    (run / "log.jsonl").write_text("".join(line + "\n" for line in log if json.loads(line)["event"] != "average"))

    said = resume_run(run, progress=False)
    assert isinstance(said, str) and "final averaging had been interrupted and is now done" in said, said
    assert all(torch.equal(load_file(run / "model.safetensors")[k], mean[k]) for k in mean)
    again = resume_run(run, progress=False)  # done: nothing more, the weights unchanged
    assert isinstance(again, str) and "averaging" not in again
    assert all(torch.equal(load_file(run / "model.safetensors")[k], mean[k]) for k in mean)
