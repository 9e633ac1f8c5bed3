"""One trainer for every model: translators and the Vision Transformer, each through its task.

    data (the task's) -> the task's batches (translation: token-count or fixed-shape; sharded by rank)
      -> the task's loss, summed over its units (real target tokens, images) / their number
      -> Adam + warmup/inverse-sqrt, constant, or linear/cosine to zero at the run's end; clipping, accumulation
      -> bf16: on the CPU a bf16 compute copy with fp32 masters (training/mixed.py), on CUDA autocast;
         `compile`: the forward and backward through torch.compile
      -> no host synchronisation per step: each step's loss stays on the device (a non-finite one makes the
         fused optimizer skip that update and every later one, on the device), and the losses are read
         together every `log_every` steps and before each evaluation, checkpoint and stop
      -> every N steps: validation (the task's metric: corpus BLEU, accuracy), atomic checkpoints, log.jsonl

Everything a resumed run needs lives in `checkpoints/step_NNNNNNN/`: weights (safetensors), the
optimizer, step/epoch/position within the epoch, and the python/numpy/torch RNG states. Batches are a
pure function of (seed, epoch), so a resumed run replays exactly the batches an uninterrupted run
sees: a run killed at any step and resumed ends with bit-identical weights on CPU.

Multi-process (DDP): `rank`/`world_size` come from `torch.distributed` when it is initialised; every
rank sees its shard of each step's batches, the loss is normalised by the *global* number of units,
so K steps on W processes equal K steps of one process over the same combined batches.
Only rank 0 writes logs, checkpoints and the progress bar.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from attnlab.inference.precision import autocast, bf16_attention, resolve_precision
from attnlab.runs.config import record_choice
from attnlab.training.config import BUDGETED_SCHEDULES, TrainConfig
from attnlab.training.deferred import DeferredLosses
from attnlab.training.mixed import compute_copy
from attnlab.training.optim import build_optimizer, learning_rate
from attnlab.training.progress import LossWindow, Progress
from attnlab.training.state import Checkpointing, RunWriter, TrainResult, TrainState, weights_finite
from attnlab.training.stop import StopPolicy
from attnlab.training.tasks import Task, batch_options, task_for
from attnlab.utils.runtime import distributed_info, intra_op_threads, resolve_device

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel


# torch.compile's backend for `TrainConfig.compile`: inductor generates fused kernels (Triton on a GPU, C++ on
# the CPU, where compiling a small Transformer takes minutes on 2 cores); tests may swap in 'aot_eager'.
COMPILE_BACKEND = "inductor"


# --------------------------------------------------------------------------- trainer
class Trainer:
    """Train `model` on `data` through its task, writing a run folder at `run_dir`.

    Args:
        model: a model with `.config` and `MODEL_TYPE` (a translator, a ViT).
        data: the task's data (`attnlab.data.TranslationData`, `ImageData`): `train` and `valid` splits.
        config: a TrainConfig.
        run_dir: the run folder (created); None trains without writing anything (tests).
        rank, world_size: None = from torch.distributed (or 0/1).
        progress: show progress on rank 0 (a bar on a terminal, plain lines otherwise).
        scalars: where rank 0 also sends log.jsonl's events (`TensorBoardScalars`), or None.
        task: batches, loss and metric (`attnlab.training.tasks`); None = the task of `model.MODEL_TYPE`.
    """

    def __init__(
        self,
        model: nn.Module,
        data,
        config: TrainConfig,
        run_dir: str | os.PathLike | None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        progress: bool = True,
        scalars=None,
        task: Task | None = None,
    ):
        self.task = task if task is not None else task_for(getattr(model, "MODEL_TYPE", "transformer"))
        self.cfg = config
        self.data = data
        self.run_dir = Path(run_dir) if run_dir is not None else None
        dist_rank, dist_world = distributed_info()
        self.rank = dist_rank if rank is None else rank
        self.world_size = dist_world if world_size is None else world_size
        self.is_main = self.rank == 0
        self.progress = progress and self.is_main
        self.device = resolve_device(config.device)
        self.model = model.to(self.device)
        self.precision = resolve_precision(
            config.precision, self.device, training=True, model_type=getattr(model, "MODEL_TYPE", "transformer")
        )
        self.ddp_model = self.model
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp_model = DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer = build_optimizer(self.model, config)
        # bf16 on the CPU: forward and backward run on a bf16 copy; the optimizer holds the fp32 masters.
        self.mixed = compute_copy(self.model, self.precision, self.device, self.world_size)
        # What runs forward and backward: the compute copy, the DDP wrapper or the model, compiled on request.
        # Validation decodes with the model itself (its loop changes shapes every step).
        forward = self.ddp_model if self.mixed is None else self.mixed.model
        self.forward_model = (
            cast(nn.Module, torch.compile(forward, backend=COMPILE_BACKEND)) if config.compile else forward
        )
        self.deferred = DeferredLosses(self.device)  # the steps' losses, read every log_every steps
        self.stop = StopPolicy(config, self.device, self.world_size)
        self.state = TrainState()  # where the run is; saved in trainer_state.pt
        self.writer = RunWriter(
            self.run_dir if self.is_main else None,
            config.keep_last,
            config.keep_best,
            scalars if self.is_main else None,
        )
        self.checkpointing = Checkpointing(
            self.state, config, self.model, self.optimizer, self.stop, self.writer, self.rank, self.world_size,
            self.task.metric,
        )  # fmt: skip
        self.checkpointing.reseed_rank()

    @property
    def best_bleu(self) -> float | None:
        return self.stop.best_bleu

    def finished(self) -> str | None:
        """Why training is over under the current config (None if it should go on)."""
        return self.stop.finished(self.state.step, self.state.epoch)

    # -- batches ----------------------------------------------------------------------------------
    def _plan(self, epoch: int) -> Sequence[Sequence[int]]:
        """This rank's batches (example indices) for `epoch`: a pure function of (seed, epoch)."""
        return self.task.plan(self.data.train, self.cfg, epoch, self.rank, self.world_size)

    def _epoch_batches(self, epoch: int, start: int = 0) -> Iterator:
        """Batches of `epoch` from its `start`-th on (a resumed run skips without collating)."""
        pin = self.device.type == "cuda"
        for indices in self._plan(epoch)[start:]:
            batch = self.task.collate(self.data, self.data.train, indices, self.cfg)
            # Page-locked, so its copy to the GPU is asynchronous: the next batch is collated meanwhile.
            yield batch.pin_memory() if pin and hasattr(batch, "pin_memory") else batch

    def _steps_per_epoch(self) -> int:
        return math.ceil(len(self._plan(0)) / self.cfg.grad_accum)

    # -- one update -------------------------------------------------------------------------------
    def _autocast(self):
        return autocast(self.precision, self.device)

    def _forward_context(self):
        # The compute copy is bf16 already: no autocast, only the attention kernel choice.
        return bf16_attention(self.device) if self.mixed is not None else self._autocast()

    def train_step(self, batches: list) -> tuple[torch.Tensor, int]:
        """One optimizer update over `batches` (gradient accumulation); returns (mean loss, a (1,) float64
        tensor on the device that is not read here; tokens).

        The loss of each micro-batch is its sum divided by the unit count (tokens, images) of *all* of them
        (on every rank), so accumulation and DDP give exactly the gradient of one big batch. A
        non-finite loss skips the update, so the weights stay those of the last finite step: with the fused
        optimizer on the device (its `found_inf`, sticky until the run stops), else after reading the loss.
        """
        model = self.forward_model
        if self.mixed is not None:
            self.mixed.refresh()  # this step's bf16 weights, from the fp32 masters
        model.train()
        if model is not self.ddp_model:
            self.ddp_model.train()  # the masters' mode, which validation and checkpoints read
        total_tokens = sum(self.task.units(b) for b in batches)  # counted on the host copy: no device read
        if self.world_size > 1:
            total = torch.tensor([float(total_tokens)], device=self.device)
            torch.distributed.all_reduce(total)
            total_tokens = int(total.item())
        total_tokens = max(total_tokens, 1)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)  # as exact as a python sum
        for i, batch in enumerate(batches):
            batch = batch.to(self.device, non_blocking=True) if _pinned(batch) else batch.to(self.device)
            sync = i == len(batches) - 1 or self.world_size == 1
            # Not syncing implies world_size > 1, where ddp_model is the DistributedDataParallel wrapper.
            ctx = cast("DistributedDataParallel", self.ddp_model).no_sync() if not sync else contextlib.nullcontext()
            with ctx:
                with self._forward_context():
                    loss = self.task.loss(model, batch, self.cfg.label_smoothing)
                # DDP averages gradients over ranks; multiplying by world_size turns that into a sum.
                (loss * (self.world_size / total_tokens)).backward()
            loss_sum += loss.detach().double()
        stats = loss_sum.reshape(1)
        if self.world_size > 1:
            torch.distributed.all_reduce(stats)  # every rank sees the same (possibly non-finite) loss
        mean = stats / total_tokens
        self.deferred.check(mean)
        on_device = bool(self.optimizer.defaults.get("fused"))
        if not on_device and bool(self.deferred.halted.item()):  # without the fused kernel: a read per step
            return mean, total_tokens
        if self.mixed is not None:
            self.mixed.grads_to_masters()
        if self.cfg.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        # A budgeted schedule reads how much of the run is spent (agreed by every rank); the others only the step.
        spent = self.stop.progress(self.state.step) if self.cfg.schedule in BUDGETED_SCHEDULES else 0.0
        lr = learning_rate(self.state.step + 1, self.cfg, spent)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if on_device:
            self.optimizer.found_inf = self.deferred.halted  # type: ignore[attr-defined]  # torch's fused Adam skips on it
        self.optimizer.step()
        return mean, total_tokens

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self, examples=None) -> dict:
        """The task's validation scores (translators: loss under teacher forcing and corpus BLEU of
        greedy/beam decoding; images: loss and accuracy)."""
        examples = self.data.valid if examples is None else examples
        return self.task.evaluate(
            self.model, self.data, examples, self.cfg, self.device, self._autocast, batch_options(self.cfg)
        )

    def _evaluate_and_log(self) -> None:
        """Rank 0 evaluates, feeds patience and logs; the StopPolicy decides what it means."""
        if not self.is_main or not self.data.valid:
            return
        scores = self.evaluate()
        self.stop.record_eval(scores[self.task.metric])
        self.checkpointing.log({"event": "eval", "step": self.state.step, "epoch": self.state.epoch, **scores})
        self.state.scores = (self.state.step, scores)

    # -- the loop ---------------------------------------------------------------------------------
    def fit(self) -> TrainResult:
        """Train until the StopPolicy says stop; then evaluate, save and report (see `_finish`)."""
        try:
            with intra_op_threads(self.cfg.threads):  # pinned by presets whose result must not depend on the cores
                return self._fit()
        finally:
            self.writer.close()

    def _fit(self) -> TrainResult:
        cfg, stop = self.cfg, self.stop
        stop.restart()  # the time budget, and a budgeted schedule's progress, count from here
        start = time.monotonic()
        losses: list[float] = []
        window, tokens_this_run = LossWindow(), 0
        bar = self._progress() if self.progress else None
        self.checkpointing.log({"event": "precision", "step": self.state.step, **self.precision.to_dict()})
        if self.is_main and self.run_dir is not None:
            record_choice(self.run_dir, self.precision)  # config.json says what `auto` picked
        reason = self.finished()
        with stop.catching_signals():
            while reason is None:
                for chunk in _chunks(self._epoch_batches(self.state.epoch, self.state.batch_in_epoch), cfg.grad_accum):
                    loss, ntok = self.train_step(chunk)
                    self.deferred.add(loss, ntok, len(chunk))
                    self.state.step, self.state.batch_in_epoch = (
                        self.state.step + 1,
                        self.state.batch_in_epoch + len(chunk),
                    )
                    self.state.tokens_seen, tokens_this_run = self.state.tokens_seen + ntok, tokens_this_run + ntok
                    step = self.state.step
                    evaluate = bool(cfg.eval_every) and step % cfg.eval_every == 0
                    save = bool(cfg.checkpoint_every) and step % cfg.checkpoint_every == 0
                    if step % cfg.log_every == 0 or evaluate or save:
                        # The one read of the device every log_every steps (and before anything that keeps
                        # the weights): the pending losses, and whether one of them diverged.
                        tokens_this_run -= self._read_losses(losses, window)
                        if stop.reason == "non_finite_loss":
                            reason = stop.reason
                            break
                        if step % cfg.log_every == 0:
                            self.checkpointing.log_train(window.take(), tokens_this_run, time.monotonic() - start)
                        if bar is not None:
                            bar.update(
                                step,
                                loss=f"{losses[-1]:.3f}",
                                epoch=self.state.epoch,
                                tok_s=f"{tokens_this_run / max(time.monotonic() - start, 1e-9):.0f}",
                            )
                    if evaluate:
                        self._evaluate_and_log()
                    reason = stop.after_step(self.state.step, self.state.epoch)
                    if reason:
                        break  # the final checkpoint is written by _finish, after the final eval
                    if save:
                        self.checkpointing.save_checkpoint()
                else:
                    self.state.epoch, self.state.batch_in_epoch = self.state.epoch + 1, 0
                    reason = stop.after_epoch(self.state.step, self.state.epoch)
            tokens_this_run -= self._read_losses(losses, window)  # the steps since the last read
            if stop.reason == "non_finite_loss":
                reason = stop.reason
            if bar is not None:
                bar.close()
            # Still catching signals: a Ctrl-C during the final evaluation does not lose the weights.
            return self._finish(reason, losses, window, tokens_this_run, time.monotonic() - start)

    def _read_losses(self, losses: list[float], window: LossWindow) -> int:
        """Read the pending losses (`DeferredLosses.read`); at a non-finite one the run has diverged: it and the
        steps after it (whose updates the device skipped) are taken back. Returns the tokens taken back."""
        back = self.deferred.read(losses, window)
        if back:
            self.state.step -= len(back)
            self.state.batch_in_epoch -= sum(b for _, b in back)
            self.state.tokens_seen -= sum(t for t, _ in back)
            self.stop.diverged()
        return sum(t for t, _ in back)

    def _finish(self, reason: str, losses, window: LossWindow, tokens: int, elapsed: float) -> TrainResult:
        """After the loop: final evaluation, the 'end' event, final weights and checkpoint.

        - a signal: no evaluation (the user is waiting); a checkpoint so `--resume` continues here.
        - a non-finite loss: nothing is saved; the newest checkpoint is the last finite state.
        """
        if reason != "signal" and not weights_finite(self.model):
            # A step with a finite loss can still blow the weights up (a huge lr): never save those.
            reason = self.stop.diverged()
        exit_code = {"signal": self.stop.exit_code, "non_finite_loss": 1}.get(reason, 0)
        failure = None
        if exit_code == 0 and (not self.cfg.eval_every or self.state.step % self.cfg.eval_every != 0):
            try:
                self._evaluate_and_log()
            except Exception as exc:  # noqa: BLE001 — saved first, raised below: never lose the weights
                failure = exc
        last = window.take()
        self.checkpointing.log(
            {
                "event": "end",
                "step": self.state.step,
                "epoch": self.state.epoch,
                "stop_reason": reason,
                "loss": last,
                "elapsed_s": elapsed,
            }
        )
        average = None
        if reason == "signal":
            self.checkpointing.save_checkpoint()
        elif reason != "non_finite_loss":
            average = self.checkpointing.save_final()
            if average is not None:
                failure = self._log_average(average, failure)
        if failure is not None:
            raise failure
        return TrainResult(
            self.run_dir,
            self.state.step,
            self.state.epoch,
            last,
            reason,
            self.best_bleu,
            losses,
            elapsed,
            tokens / max(elapsed, 1e-9),
            self.writer.last_checkpoint,
            exit_code,
            self.state.scores[1],
            average,
        )

    def _log_average(self, event: dict, failure: Exception | None) -> Exception | None:
        """Log the 'average' event, then score the averaged weights (the model holds them now): those are
        what a user loads, so theirs are the run's final scores. Returns the first evaluation failure, if any
        (`failure`: the final evaluation's, which skips this one)."""
        self.checkpointing.log(event)
        if failure is not None or len(event["steps"]) < 2 or not self.is_main or not self.data.valid:
            return failure  # nothing averaged: the final scores are those of the weights as trained
        try:
            scores = self.evaluate()
        except Exception as exc:  # noqa: BLE001 — the weights are saved; raised by the caller
            return exc
        self.checkpointing.log(
            {"event": "eval", "step": self.state.step, "epoch": self.state.epoch, "weights": "averaged", **scores}
        )
        self.state.scores = (self.state.step, scores)
        return None

    def _progress(self) -> Progress:
        total = self._steps_per_epoch() * self.cfg.epochs
        if self.cfg.max_steps is not None:
            total = min(total, self.cfg.max_steps)
        return Progress(total, initial=self.state.step, budget=self.cfg.time_budget)


def _pinned(batch) -> bool:
    """Whether `batch` (a translation `Batch`) is in page-locked memory, so it can be copied asynchronously."""
    src = getattr(batch, "src", None)
    return isinstance(src, torch.Tensor) and src.is_pinned()


def _chunks(iterable, size: int) -> Iterator[list]:
    it = iter(iterable)
    while chunk := list(itertools.islice(it, size)):
        yield chunk
