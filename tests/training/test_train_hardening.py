"""`train`: nothing the user made is lost, every bad flag is one line (exit 2), an
interrupted run saves a checkpoint, a diverging run stops, damaged checkpoints are skipped on resume."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from train_helpers import DATA, SUBPROCESS_ENV, needs_data

from attnlab.cli import main
from attnlab.runs.checkpoints import list_checkpoints, load_trainer_state, save_checkpoint, verify_checkpoint
from attnlab.runs.weights import read_weights
from attnlab.utils.files import append_jsonl

pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny(out, *extra):
    return ["train", "--preset", "tiny", "--out", str(out), "--data", DATA or "missing.zip", "--no-progress", *extra]


def _strict_json(line: str):
    def bad(const):
        raise ValueError(f"bare {const} in log.jsonl")

    return json.loads(line, parse_constant=bad)


# --------------------------------------------------------------------------- item 1: the output folder
def test_train_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    mine = tmp_path / "p"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "cfg"}')
    assert main(_tiny(mine)) == 2
    err = capsys.readouterr().err
    assert "holds no attnlab output" in err and "Traceback" not in err
    assert (mine / "config.json").read_text() == '{"my": "cfg"}'
    assert sorted(p.name for p in mine.iterdir()) == ["config.json"]


BAD_FLAGS = [
    (["--preset", "d2l", "--max-len", "8"], "does not take ['max_len']"),
    (["--preset", "d2l", "--tokenizer", "bpe"], "does not take ['tokenizer']"),
    (["--set", "data.typo=1"], "does not take ['typo']"),
    (["--device", "bogus"], "unknown device 'bogus'"),
    (["--set", 'model.dropout="x"'], "TransformerConfig.dropout must be a number"),
    (["--time-budget", "nan"], "time_budget must be a finite number > 0.0"),
    (["--nproc", "0"], "--nproc must be between 1 and"),
    (["--checkpoint-every", "-1"], "checkpoint_every must be a finite number >= 0"),
    (["--keep-best", "-1"], "keep_best must be a finite number >= 0"),
    (["--lr", "inf"], "lr must be a finite number >= 0.0"),
    (["--set", "train.betas=[0.9, 1.5]"], "betas[1] must be"),
    (["--set", "train.eval_beam=100000"], "eval_beam must be a finite number >= 1 and <= 64"),
]


@pytest.mark.parametrize("flags,message", BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_bad_train_flags_are_one_line_and_write_nothing(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--no-progress", *flags]
    if "--preset" not in flags:
        argv += ["--preset", "tiny"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()  # refused before anything was written


def test_out_that_is_a_file_or_under_a_file_or_unwritable(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("keep me")
    for out, message in (
        (f, "is a file"),
        (f / "sub", "which is a file"),
        ("/proc/attnlab-cannot-write-here", "cannot write in /proc"),
    ):
        assert main(_tiny(out)) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    assert f.read_text() == "keep me"


def test_config_json_with_bad_values_is_refused_by_the_library():
    from attnlab.models import build_model
    from attnlab.training.config import TrainConfig

    with pytest.raises(ValueError, match=r"TransformerConfig.dropout must be a number, got 'x'"):
        build_model("transformer", {"src_vocab_size": 5, "tgt_vocab_size": 5, "dropout": "x"})
    with pytest.raises(ValueError, match=r"TrainConfig.max_steps must be an integer or null"):
        TrainConfig.from_dict({"max_steps": "10"})
    with pytest.raises(ValueError, match="patience"):
        TrainConfig(patience=0)


# --------------------------------------------------------------------------- item 8
@needs_data
def test_bahdanau_without_preset_uses_its_default(tmp_path, capsys):
    from attnlab.training.presets import DEFAULT_PRESET, get_preset

    assert get_preset("bahdanau") == get_preset("bahdanau", DEFAULT_PRESET["bahdanau"])
    out = tmp_path / "b"
    assert (
        main(["train", "--model", "bahdanau", "--out", str(out), "--data", DATA, "--max-steps", "1", "--no-progress"])
        == 0
    )
    assert json.loads((out / "config.json").read_text())["model_type"] == "bahdanau"


# --------------------------------------------------------------------------- item 2 (the trainer's half)
@needs_data
def test_a_failing_final_evaluation_never_costs_the_weights(tmp_path, monkeypatch):
    from train_helpers import tiny_run

    from attnlab.training.trainer import Trainer

    def broken(self, examples=None):
        raise RuntimeError("decoding blew up")

    monkeypatch.setattr(Trainer, "evaluate", broken)
    with pytest.raises(RuntimeError, match="decoding blew up"):
        tiny_run(tmp_path / "run", max_steps=2)
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step_0000002"]


# --------------------------------------------------------------------------- item 17
def test_weight_decay_only_on_matrices_not_biases_norms_or_positions():
    from attnlab.attention import PositionalEncoding
    from attnlab.models import build_model
    from attnlab.training.config import TrainConfig
    from attnlab.training.optim import build_optimizer

    model = build_model(
        "transformer",
        {
            "src_vocab_size": 11,
            "tgt_vocab_size": 13,
            "num_hiddens": 8,
            "num_heads": 2,
            "num_layers": 1,
            "ffn_num_hiddens": 16,
            "positions": "learned",
            "max_len": 16,
        },
    )
    opt = build_optimizer(model, TrainConfig(optimizer="adamw", weight_decay=0.1, device="cpu"))
    decay = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    positions = {id(p) for m in model.modules() if isinstance(m, PositionalEncoding) for p in m.parameters()}
    assert positions and not positions & decay
    for p in model.parameters():
        if p.dim() < 2:
            assert id(p) not in decay, names[id(p)]  # biases, LayerNorm gains
        elif id(p) not in positions:
            assert id(p) in decay, names[id(p)]  # projections, token embeddings, output layer
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


# --------------------------------------------------------------------------- item 6
def test_log_lines_stay_valid_json_with_non_finite_numbers(tmp_path):
    path = tmp_path / "log.jsonl"
    append_jsonl(path, {"loss": math.nan, "x": [math.inf, 1.0], "y": {"z": -math.inf}})
    assert _strict_json(path.read_text()) == {"loss": None, "x": [None, 1.0], "y": {"z": None}}


@needs_data
def test_diverging_run_stops_non_zero_and_never_saves_non_finite_weights(tmp_path, capsys):
    out = tmp_path / "div"
    code = main(_tiny(out, "--lr", "1e30", "--max-steps", "8", "--checkpoint-every", "1"))
    err = capsys.readouterr().err
    assert code == 1
    assert "non-finite" in err and "Lower --lr" in err
    assert not (out / "model.safetensors").exists()  # no final weights from a diverged run
    for p in list_checkpoints(out):
        for name, t in read_weights(p / "model.safetensors").items():
            assert torch.isfinite(t).all(), (p.name, name)
    events = [_strict_json(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "end" and events[-1]["stop_reason"] == "non_finite_loss"
    assert events[-1]["step"] < 8


# --------------------------------------------------------------------------- item 3
@needs_data
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_saves_a_checkpoint_and_resumes(tmp_path, signum):
    out = tmp_path / "sig"
    # The tiny preset checkpoints only at the end (checkpoint_every=0): before, Ctrl-C saved nothing.
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnlab", *_tiny(out, "--epochs", "100000")],
        env=SUBPROCESS_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = out / "log.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and sum(1 for line in log.read_text().splitlines() if '"train"' in line) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert "--resume" in err and "Traceback" not in err
    (saved,) = list_checkpoints(out)
    assert verify_checkpoint(saved) is None
    step = load_trainer_state(saved)["step"]
    assert step >= 3
    assert main(["train", "--resume", str(out), "--max-steps", str(step + 1), "--no-progress"]) == 0
    assert (out / "model.safetensors").is_file()


# --------------------------------------------------------------------------- item 4
@needs_data
@pytest.mark.parametrize("victim", ["trainer_state.pt", "model.safetensors"])
def test_resume_skips_a_damaged_newest_checkpoint(tmp_path, capsys, victim):
    out = tmp_path / "run"
    assert main(_tiny(out, "--max-steps", "4", "--checkpoint-every", "2")) == 0
    newest = list_checkpoints(out)[-1]
    path = newest / victim
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a copy cut short
    leftover = out / "checkpoints" / ".step_0000009.abc123"  # a save killed half-way
    leftover.mkdir()
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--max-steps", "5", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"skipping damaged checkpoint {newest}" in err and victim in err
    assert not leftover.exists()
    events = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e for e in events if e["event"] == "resume"][-1]["from"] == "step_0000002"
    assert verify_checkpoint(list_checkpoints(out)[-1]) is None


def test_manifest_catches_truncation_and_corruption(tmp_path):
    model = torch.nn.Linear(3, 3)
    p = save_checkpoint(tmp_path, 1, model, {"step": 1}, {"step": 1})
    assert verify_checkpoint(p) is None
    weights = (p / "model.safetensors").read_bytes()
    (p / "model.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))  # same size, one bit
    assert "sha256" in verify_checkpoint(p)
    (p / "model.safetensors").write_bytes(weights)
    assert verify_checkpoint(p) is None
    shutil.copy(p / "meta.json", p / "trainer_state.pt")
    assert "bytes" in verify_checkpoint(p)


# --------------------------------------------------------------------------- item 19
def test_progress_is_plain_lines_when_not_a_terminal():
    from attnlab.training.progress import Progress

    now = [0.0]
    stream = io.StringIO()
    bar = Progress(total=100, stream=stream, every_s=5.0, clock=lambda: now[0])
    for step in range(1, 101):
        now[0] += 0.125  # 12.5 s in all: lines at 5 s and 10 s, then the last state at close
        bar.update(step, loss="1.000")
    bar.close()
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines == [f"train: step {s}/100 loss 1.000" for s in (40, 80, 100)]


# --------------------------------------------------------------------------- the stop policy
def test_stop_policy_owns_every_reason():
    from attnlab.training.config import TrainConfig
    from attnlab.training.stop import StopPolicy

    now = [0.0]
    policy = StopPolicy(
        TrainConfig(max_steps=10, epochs=3, time_budget=5.0, patience=2, device="cpu"), clock=lambda: now[0]
    )
    assert policy.after_step(1, 0) is None
    assert policy.after_step(10, 0) == "max_steps"
    assert policy.after_epoch(4, 3) == "epochs"
    now[0] = 6.0
    assert policy.after_step(4, 0) == "time_budget"
    assert policy.finished(4, 0) is None  # a time budget belongs to one invocation, not to the run
    for bleu in (5.0, 4.0, 3.0):
        policy.record_eval(bleu)
    assert policy.after_step(4, 0) == "early_stopping"
    state = policy.state_dict()
    fresh = StopPolicy(policy.cfg)
    fresh.load_state_dict(state)
    assert fresh.finished(4, 0) == "early_stopping" and fresh.best_bleu == 5.0
    with fresh.catching_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        assert fresh.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    assert fresh.after_step(1, 0) == "signal" and fresh.exit_code == 143
    assert fresh.diverged() == "non_finite_loss"
