"""The trainer: loss masking, schedule, seeded reproducibility, kill-and-resume, early stopping, and the
book's d2l preset reaching BLEU 1.000 on its four sentences."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from train_helpers import DATA, SUBPROCESS_ENV, needs_data, tiny_run, train_argv

from attnlab.training.config import TrainConfig
from attnlab.training.loss import masked_cross_entropy, sequence_loss
from attnlab.training.optim import learning_rate

pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------- loss
def test_loss_sums_real_tokens_and_divides_by_their_count():
    torch.manual_seed(0)
    B, T, V = 3, 5, 7
    logits, targets = torch.randn(B, T, V), torch.randint(0, V, (B, T))
    valid = torch.tensor([5, 2, 3])
    rows = [(b, t) for b in range(B) for t in range(int(valid[b]))]
    expected = torch.stack([F.cross_entropy(logits[b, t][None], targets[b, t][None]) for b, t in rows]).mean()
    torch.testing.assert_close(masked_cross_entropy(logits, targets, valid), expected)
    total, count = sequence_loss(logits, targets, valid)
    assert int(count) == 10
    torch.testing.assert_close(total / count, expected)


def test_loss_ignores_padding_values_and_logits():
    torch.manual_seed(1)
    B, T, V = 4, 6, 9
    logits = torch.randn(B, T, V, requires_grad=True)
    targets = torch.randint(0, V, (B, T))
    valid = torch.tensor([6, 1, 4, 2])
    pad = torch.arange(T)[None, :] >= valid[:, None]  # (B, T)
    loss = masked_cross_entropy(logits, targets, valid)
    loss.backward()
    assert torch.all(logits.grad[pad] == 0)  # padding gets no gradient at all
    other_logits = torch.where(pad[..., None], torch.randn(B, T, V) * 100, logits.detach())
    other_targets = torch.where(pad, torch.randint(0, V, (B, T)), targets)
    assert masked_cross_entropy(other_logits, other_targets, valid).item() == loss.item()


def test_loss_does_not_underweight_eos_like_the_book():
    # Two sentences, 1 and 4 real tokens: each real token weighs 1/5 (the book's mean over padded
    # steps and then over sentences would weigh the lone token 4x as much as each of the others).
    logits = torch.zeros(2, 4, 3)
    logits[0, 0] = torch.tensor([5.0, 0.0, 0.0])  # the first sentence's only token: confident, right
    targets = torch.zeros(2, 4, dtype=torch.long)
    valid = torch.tensor([1, 4])
    per_token = [F.cross_entropy(logits[0, 0][None], targets[0, :1]).item()] + [torch.log(torch.tensor(3.0)).item()] * 4
    assert masked_cross_entropy(logits, targets, valid).item() == pytest.approx(sum(per_token) / 5)


def test_label_smoothing():
    logits = torch.tensor([[[4.0, 0.0, 0.0]]])
    target, valid = torch.tensor([[0]]), torch.tensor([1])
    plain = masked_cross_entropy(logits, target, valid)
    smooth = masked_cross_entropy(logits, target, valid, label_smoothing=0.1)
    torch.testing.assert_close(smooth, F.cross_entropy(logits[0], target[0], label_smoothing=0.1))
    assert smooth > plain


def test_learning_rate_schedules():
    cfg = TrainConfig(lr=1e-3, warmup_steps=100)
    assert learning_rate(1, cfg) == pytest.approx(1e-5)
    assert learning_rate(50, cfg) == pytest.approx(5e-4)
    assert learning_rate(100, cfg) == pytest.approx(1e-3)
    assert learning_rate(400, cfg) == pytest.approx(5e-4)  # 1e-3 * sqrt(100 / 400)
    const = TrainConfig(lr=5e-3, schedule="constant")
    assert learning_rate(1, const) == learning_rate(10_000, const) == 5e-3


def test_train_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match="unknown TrainConfig keys"):
        TrainConfig.from_dict({"lr": 1e-3, "learning_rate": 1})
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="step")
    with pytest.raises(ValueError, match="batch_tokens"):
        TrainConfig(batch_tokens=None, batch_size=None)


# --------------------------------------------------------------------------- reproducibility
@needs_data
def test_same_seed_same_losses(tmp_path):
    a = tiny_run(None, max_steps=6, seed=3)
    b = tiny_run(None, max_steps=6, seed=3)
    c = tiny_run(None, max_steps=6, seed=4)
    assert len(a.losses) == 6
    assert a.losses == b.losses  # bit-identical on CPU
    assert a.losses != c.losses


def _train_args(out, *extra):
    return train_argv(out, "--seed", "7", "--checkpoint-every", "3", "--set", "model.dropout=0.1", *extra, steps=8)


# `attnlab train` in a process that SIGKILLs itself right after step 5, as a crash or the OOM killer would.
KILLED_AT_STEP_5 = """
import os, signal, sys
from attnlab.cli import main
from attnlab.training.stop import StopPolicy
after_step = StopPolicy.after_step
def kill_at_5(self, step, epoch):
    if step == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return after_step(self, step, epoch)
StopPolicy.after_step = kill_at_5
sys.exit(main(sys.argv[1:]))
"""


def _weights(path):
    from safetensors.torch import load_file

    return load_file(path)


@needs_data
def test_killed_and_resumed_run_ends_with_identical_weights(tmp_path, capsys):
    from attnlab.cli import main

    # Dropout on, so the restored torch RNG state matters too.
    assert main(_train_args(tmp_path / "full")) == 0
    # Only the run to be killed needs its own process (one torch thread, like this one).
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_STEP_5, *_train_args(tmp_path / "killed")],
        env=SUBPROCESS_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (tmp_path / "killed" / "model.safetensors").exists()
    steps = sorted(p.name for p in (tmp_path / "killed" / "checkpoints").iterdir())
    assert steps == ["step_0000003"]  # no temp folder left behind; steps 4 and 5 lost
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "killed"), "--no-progress"]) == 0
    assert "final training loss" in capsys.readouterr().out
    a, b = _weights(tmp_path / "full" / "model.safetensors"), _weights(tmp_path / "killed" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    events = [json.loads(line) for line in (tmp_path / "killed" / "log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "resume" and e["step"] == 3 for e in events)

    assert main(["train", "--resume", str(tmp_path / "killed"), "--no-progress"]) == 0
    assert "already finished (max_steps)" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # unknown flag
        main(["train", "--resume", str(tmp_path / "killed"), "--bogus"])
    assert main(["train", "--resume", str(tmp_path / "killed"), "--lr", "0.1"]) == 2
    assert "cannot change" in capsys.readouterr().err


@needs_data
def test_early_stopping_and_keep_best(tmp_path):
    from attnlab.runs.checkpoints import list_checkpoints
    from attnlab.utils.files import read_json

    result = tiny_run(
        tmp_path / "run",
        max_steps=40,
        eval_every=2,
        checkpoint_every=2,
        patience=2,
        keep_last=1,
        keep_best=2,
        lr=0.0,
        warmup_steps=1,
    )  # lr 0: BLEU never improves
    assert result.stop_reason == "early_stopping"
    assert result.step == 6  # evals at 2 (best), 4, 6 -> two without improvement
    kept = list_checkpoints(tmp_path / "run")
    metas = [read_json(p / "meta.json") for p in kept]
    assert [m["step"] for m in metas] == [2, 4, 6]  # 2 best by BLEU (ties -> earliest) + the last
    events = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    evals = [e for e in events if e["event"] == "eval"]
    assert [e["step"] for e in evals] == [2, 4, 6]
    assert all("valid_bleu" in e and "valid_loss" in e for e in evals)


@needs_data
def test_time_budget_stops_training(tmp_path):
    result = tiny_run(tmp_path / "run", max_steps=None, epochs=10_000, time_budget=1.0)
    assert result.stop_reason == "time_budget"
    assert (tmp_path / "run" / "model.safetensors").is_file()


# --------------------------------------------------------------------------- the book's preset
@pytest.mark.slow
@needs_data
def test_d2l_transformer_preset_translates_the_books_four_sentences(tmp_path):
    from attnlab.metrics import book_bleu
    from attnlab.runs.loading import load_translator
    from attnlab.training.launch import train_run
    from attnlab.training.presets import get_preset

    preset = get_preset("transformer", "d2l")
    start = time.perf_counter()
    train_run(
        "transformer",
        preset["model"],
        TrainConfig.from_dict(preset["train"]),
        {**preset["data"], "path": DATA},
        tmp_path / "d2l",
        progress=False,
    )
    seconds = time.perf_counter() - start
    scores = book_bleu(load_translator(tmp_path / "d2l"))
    print(f"d2l transformer preset: {seconds:.1f} s; " + "; ".join(f"{s} => {o} ({b:.3f})" for s, o, b in scores))
    assert [b for _, _, b in scores] == [1.0, 1.0, 1.0, 1.0], scores


@pytest.mark.slow
@needs_data
def test_ddp_two_processes_equal_one_process_over_the_combined_batches(tmp_path):
    """`--nproc 2` (torchrun, gloo on CPU): rank r takes batches r, r+2, ... of the same plan, so 3 DDP
    steps see the batches 3 single-process steps with --grad-accum 2 see; the weights must agree."""
    from attnlab.cli import main

    common = [
        "--model",
        "transformer",
        "--preset",
        "tiny",
        "--data",
        DATA,
        "--seed",
        "5",
        "--max-steps",
        "3",
        "--batch-tokens",
        "128",  # ~10 batches: 3 steps stay within epoch 0 on both sides
        "--no-progress",
    ]
    assert main(["train", *common, "--grad-accum", "2", "--out", str(tmp_path / "single")]) == 0
    ddp = subprocess.run(
        [sys.executable, "-m", "attnlab", "train", *common, "--nproc", "2", "--out", str(tmp_path / "ddp")],
        env=SUBPROCESS_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert ddp.stdout.count("final training loss") == 1  # only rank 0 reports
    a, b = _weights(tmp_path / "single" / "model.safetensors"), _weights(tmp_path / "ddp" / "model.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=0, msg=k)

    # Same batches at every step: the logged per-step losses agree too.
    def losses(run):
        lines = (tmp_path / run / "log.jsonl").read_text().splitlines()
        return [e["loss"] for e in map(json.loads, lines) if e["event"] == "train"]

    assert len(losses("ddp")) == 3
    assert losses("ddp") == pytest.approx(losses("single"), abs=1e-6)


@needs_data
def test_bpe_vocabulary_with_shared_embeddings_trains_and_translates(tmp_path):
    """The subword option end to end: one joint BPE vocabulary, one tied embedding matrix."""
    from attnlab.runs.loading import load_translator
    from attnlab.training.launch import train_run
    from attnlab.training.presets import get_preset

    preset = get_preset("transformer", "tiny")
    model_cfg = {**preset["model"], "share_embeddings": True}
    data_cfg = {**preset["data"], "path": DATA, "tokenizer": "bpe", "bpe_vocab_size": 400}
    cfg = TrainConfig.from_dict({**preset["train"], "max_steps": 3})
    train_run("transformer", model_cfg, cfg, data_cfg, tmp_path / "bpe", progress=False)
    t = load_translator(tmp_path / "bpe")
    assert len(t.src_vocab) == len(t.tgt_vocab) <= 400
    m = t.model
    assert m.config.share_embeddings
    # parameters() counts a tied matrix once, the state dict under each of its names.
    assert sum(p.numel() for p in m.parameters()) < sum(v.numel() for v in m.state_dict().values())
    assert isinstance(t.translate(["go ."])[0], str)


def test_ranks_get_their_own_reproducible_dropout_streams():
    from types import SimpleNamespace

    from attnlab.training.state import Checkpointing, TrainState

    def draw(rank, step, world_size=2):
        parts = SimpleNamespace(
            world_size=world_size, rank=rank, state=TrainState(step=step), cfg=SimpleNamespace(seed=3)
        )
        Checkpointing.reseed_rank(parts)
        return torch.rand(4)

    assert torch.equal(draw(1, 10), draw(1, 10))  # a resumed rank continues its own stream
    assert not torch.equal(draw(0, 10), draw(1, 10))  # ranks differ (their dropout masks must)
    assert not torch.equal(draw(1, 10), draw(1, 20))  # and move on at each checkpoint
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    assert torch.equal(draw(0, 10, world_size=1), expected)  # one process: the seed alone decides
