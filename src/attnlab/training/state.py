"""The Trainer's resumable state and what it writes into its run folder (log.jsonl, checkpoints).

`TrainState` is where a run is (step, epoch, position in the epoch, tokens, latest scores), a record the
Trainer holds; `Checkpointing` says what a checkpoint holds (that record, the optimizer, RNG streams, the
StopPolicy's counters) and when it is written, from the parts it is given; `RunWriter` does the writing;
`TrainResult` is what a finished `Trainer.fit` reports. Only rank 0 of a run with a folder writes: a
`RunWriter(None, ...)` (other ranks, or training without a folder) accepts every call and writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from attnlab.runs.checkpoints import prune_checkpoints, save_checkpoint
from attnlab.runs.layout import LOG_FILE
from attnlab.runs.weights import save_weights
from attnlab.training.averaging import install_average, plan_average
from attnlab.training.config import TrainConfig
from attnlab.training.stop import StopPolicy
from attnlab.utils.files import append_jsonl
from attnlab.utils.runtime import rng_state, seed_everything, set_rng_state


def weights_finite(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


class RunWriter:
    """log.jsonl and checkpoints/ of the run at `run_dir` (None: write nothing).

    Args:
        run_dir: the run folder, or None on every rank but 0 and when training without a folder.
        keep_last, keep_best: checkpoints kept after each save (`checkpoint.prune_checkpoints`).
        scalars: also given every logged event (`attnlab.training.tensorboard.TensorBoardScalars`), or None.
    """

    def __init__(self, run_dir: Path | None, keep_last: int, keep_best: int, scalars=None):
        self.run_dir, self.keep_last, self.keep_best, self.scalars = run_dir, keep_last, keep_best, scalars
        self.last_checkpoint: Path | None = None  # the newest checkpoint written (where --resume continues)

    def log(self, event: dict) -> None:
        """One line of log.jsonl: `event` with the wall-clock time."""
        event = {"time": time.time(), **event}
        if self.run_dir is not None:
            append_jsonl(self.run_dir / LOG_FILE, event)
        if self.scalars is not None:
            self.scalars.log(event)

    def close(self) -> None:
        """Flush and close the scalars' files (log.jsonl is appended line by line and needs nothing)."""
        if self.scalars is not None:
            self.scalars.close()

    def checkpoint(self, model: nn.Module, step: int, trainer_state: Callable[[], dict], meta: dict) -> None:
        """checkpoints/step_NNNNNNN (weights, `trainer_state()`, `meta`), then prune the old ones.
        Non-finite weights are never saved (the loop stops at the next step: its loss is NaN)."""
        if self.run_dir is None:
            return
        if not weights_finite(model):
            self.log({"event": "skipped_checkpoint", "step": step, "why": "non-finite weights"})
            return
        self.last_checkpoint = save_checkpoint(self.run_dir, step, model, trainer_state(), meta)
        prune_checkpoints(self.run_dir, self.keep_last, self.keep_best)

    def final_weights(self, model: nn.Module) -> None:
        """model.safetensors at the run root: what `load_translator` reads."""
        if self.run_dir is not None:
            save_weights(model, self.run_dir / "model.safetensors")


@dataclass
class TrainState:
    """Where a run is (the Annotated Transformer's `TrainState`): a record the Trainer updates after each
    step and epoch, and a checkpoint saves."""

    step: int = 0  # optimizer updates so far
    epoch: int = 0  # full passes over the training split so far
    batch_in_epoch: int = 0  # batches of the current epoch already consumed (on this rank)
    tokens_seen: int = 0  # real target tokens trained on so far
    scores: tuple[int, dict] = (-1, {})  # (step, scores) of the latest evaluation


class Checkpointing:
    """What a checkpoint of a run holds and when it is written, for the parts of one training run.

    Args:
        state: the run's TrainState (read at each save, filled in on resume).
        cfg, model, optimizer, stop: the run's TrainConfig, model (unwrapped), optimizer and StopPolicy.
        writer: the run folder's RunWriter (rank 0), or one that writes nothing.
        rank, world_size: this process's place in the run.
        metric: the validation score (higher is better) that ranks the best checkpoints (the task's).
    """

    def __init__(
        self,
        state: TrainState,
        cfg: TrainConfig,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        stop: StopPolicy,
        writer: RunWriter,
        rank: int,
        world_size: int,
        metric: str = "valid_bleu",
    ):
        self.state, self.cfg, self.model, self.optimizer = state, cfg, model, optimizer
        self.stop, self.writer, self.rank, self.world_size = stop, writer, rank, world_size
        self.metric = metric  # the validation score that ranks the best checkpoints

    # -- what a checkpoint holds --------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        st = self.state
        return {
            "step": st.step,
            "epoch": st.epoch,
            "batch_in_epoch": st.batch_in_epoch,
            "optimizer": self.optimizer.state_dict(),
            "rng": rng_state(),
            **self.stop.state_dict(),
            "tokens_seen": st.tokens_seen,
            "schedule": {"name": self.cfg.schedule, "last_lr": self.optimizer.param_groups[0]["lr"]},
        }

    def load_state_dict(self, saved: dict) -> None:
        st = self.state
        st.step, st.epoch, st.batch_in_epoch = saved["step"], saved["epoch"], saved["batch_in_epoch"]
        self.optimizer.load_state_dict(saved["optimizer"])
        self.stop.load_state_dict(saved)
        st.tokens_seen = saved["tokens_seen"]
        set_rng_state(saved["rng"])  # rank 0's generators...
        self.reseed_rank()  # ...then each rank's own stream, exactly as the interrupted run had it

    def reseed_rank(self) -> None:
        """Ranks start from one seed, so their initial weights agree; their dropout must not. Each rank
        gets its own stream, derived from (seed, rank, step) at the start and at every checkpoint, so
        a resumed multi-process run continues every rank's stream exactly."""
        if self.world_size > 1:
            seed_everything((self.cfg.seed * 1_000_003 + self.rank * 7_919 + self.state.step) % 2**63)

    # -- writing the run folder (rank 0 only, through RunWriter) --------------------------------
    def log(self, event: dict) -> None:
        self.writer.log(event)

    def log_train(self, loss: float | None, tokens: int, elapsed: float) -> None:
        self.log(
            {
                "event": "train",
                "step": self.state.step,
                "epoch": self.state.epoch,
                "loss": loss,
                "lr": self.optimizer.param_groups[0]["lr"],
                "tokens_per_s": tokens / max(elapsed, 1e-9),
                "elapsed_s": elapsed,
            }
        )

    def save_checkpoint(self) -> None:
        st = self.state
        self.reseed_rank()  # on every rank, before rank 0 saves its generator state
        # Only a score measured at this very step may rank this checkpoint among the best.
        scored_step, scores = st.scores
        scores = scores if scored_step == st.step else {}
        meta = {
            "step": st.step,
            "epoch": st.epoch,
            "stop_reason": self.stop.reason,
            "valid_bleu": scores.get("valid_bleu"),
            "valid_loss": scores.get("valid_loss"),
        }
        if self.metric != "valid_bleu":
            meta.update({self.metric: scores.get(self.metric), "best_by": self.metric})
        self.writer.checkpoint(self.model, st.step, self.state_dict, meta)

    def save_final(self) -> dict | None:
        """Final weights at the run root, then a checkpoint that marks the run finished (the weights as
        trained, and the optimizer: `--resume` continues from there). With `average_last` K >= 2, the root's
        weights, and the model's, then become the mean of the final weights and the newest K-1 checkpoints
        before them (`attnlab.training.averaging`); returns that 'average' event (None when off, and on every
        rank but the one that writes)."""
        self.writer.final_weights(self.model)
        k, run_dir = self.cfg.average_last, self.writer.run_dir
        plan = plan_average(run_dir, self.state.step, k) if k >= 2 and self.rank == 0 else None
        self.save_checkpoint()
        if plan is None:
            return None
        if run_dir is not None:
            install_average(run_dir, self.model, plan)
        return plan.event


@dataclass
class TrainResult:
    """What `Trainer.fit` reports."""

    run_dir: Path | None  # None when trained without a run folder
    step: int
    epoch: int
    train_loss: float | None  # mean per-token loss of the last log window
    stop_reason: str
    best_bleu: float | None  # the best validation score of the task's metric (BLEU for translators)
    losses: list[float] = field(default_factory=list)  # per-step training loss of this invocation
    seconds: float = 0.0
    tokens_per_second: float = 0.0
    checkpoint: Path | None = None  # the newest checkpoint written (where --resume continues)
    exit_code: int = 0  # 0, 128+signal after SIGINT/SIGTERM, 1 after a non-finite loss
    # the latest validation scores (valid_bleu or valid_accuracy, ...): at the end, of the weights a user loads
    scores: dict = field(default_factory=dict)
    average: dict | None = None  # the 'average' event (the steps averaged, any shortfall), under average_last
