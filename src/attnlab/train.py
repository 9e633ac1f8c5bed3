"""One trainer for every seq2seq model (the Transformer and the Bahdanau encoder–decoder).

    data (attnlab.data) -> iterate_batches (token-count or fixed-shape, sharded by rank)
      -> masked cross-entropy, summed over real tokens / number of real tokens
      -> Adam + warmup/inverse-sqrt (or constant) lr, gradient clipping, accumulation, bf16 on CUDA
      -> every N steps: validation loss + corpus BLEU, atomic checkpoints, log.jsonl

Everything a resumed run needs lives in `checkpoints/step_NNNNNNN/`: weights (safetensors), the
optimizer, step/epoch/position within the epoch, and the python/numpy/torch RNG states. Batches are a
pure function of (seed, epoch), so a resumed run replays exactly the batches an uninterrupted run
sees: a run killed at any step and resumed ends with bit-identical weights on CPU.

Multi-process (DDP): `rank`/`world_size` come from `torch.distributed` when it is initialised; every
rank sees its shard of each step's batches, the loss is normalised by the *global* number of target
tokens, so K steps on W processes equal K steps of one process over the same combined batches.
Only rank 0 writes logs, checkpoints and the progress bar.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import signal
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab import checkpoint as ckpt
from attnlab import precision as prec

# Test hook: SIGKILL this process right after finishing the given step (the kill-and-resume test).
KILL_ENV = "ATTNLAB_TEST_KILL_AT_STEP"


@dataclass
class TrainConfig:
    """How to train; saved in the run's config.json (`train`) and restored by `--resume`."""

    seed: int = 0                        # one seed for python, numpy, torch (init, dropout) and batch order
    epochs: int = 10                     # passes over the training split (stop at whichever limit comes first)
    max_steps: int | None = None         # optimizer updates; None = no step limit
    time_budget: float | None = None     # seconds of training per invocation; None = no limit
    batch_tokens: int | None = 4096      # target tokens per batch (token-count batching); None = use batch_size
    batch_size: int | None = None        # sentences per batch (the book's fixed-size batches)
    num_steps: int | None = None         # pad/truncate every sequence to this length (the book's shapes)
    grad_accum: int = 1                  # batches whose gradients add up to one optimizer update
    optimizer: str = "adam"              # 'adam' or 'adamw'
    lr: float = 1e-3                     # peak learning rate (after warmup) or the constant rate
    schedule: str = "inverse_sqrt"       # 'inverse_sqrt' (linear warmup, then lr*sqrt(warmup/step)) or 'constant'
    warmup_steps: int = 400              # linear warmup length for 'inverse_sqrt'
    betas: tuple[float, float] = (0.9, 0.98)  # Adam betas (the Transformer paper's 0.98)
    eps: float = 1e-9                    # Adam epsilon (the paper's)
    weight_decay: float = 0.0            # decoupled for adamw, L2 for adam
    label_smoothing: float = 0.0         # mass spread uniformly over the vocabulary (paper: 0.1)
    grad_clip: float | None = 1.0        # max global gradient norm; None = no clipping
    eval_every: int = 0                  # steps between validation loss + BLEU; 0 = only at the end
    eval_limit: int | None = 500         # validation sentences decoded for BLEU (None = all)
    eval_beam: int = 1                   # beam for validation BLEU (1 = greedy)
    checkpoint_every: int = 0            # steps between checkpoints; 0 = only at the end
    keep_last: int = 5                   # newest checkpoints kept (for `attnlab average --last K`)
    keep_best: int = 1                   # checkpoints kept for the best validation BLEU
    patience: int | None = None          # stop after this many evaluations without a better BLEU
    amp: bool = True                     # False forces fp32 whatever `precision` says (older configs)
    precision: str = "auto"              # 'auto' (bf16 where native: AVX512-BF16/AMX CPUs, bf16 GPUs), 'fp32', 'bf16'
    log_every: int = 10                  # steps between 'train' events in log.jsonl
    device: str = "auto"                 # 'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ...

    def __post_init__(self):
        self.betas = tuple(self.betas)
        if self.schedule not in ("inverse_sqrt", "constant"):
            raise ValueError(f"schedule must be 'inverse_sqrt' or 'constant', got {self.schedule!r}")
        if self.optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
        if self.batch_tokens is None and self.batch_size is None:
            raise ValueError("set batch_tokens (tokens per batch) or batch_size (sentences per batch)")
        for name in ("epochs", "grad_accum", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive number of steps or None, got {self.max_steps}")
        if self.precision not in prec.TRAIN_PRECISIONS:
            raise ValueError(f"precision must be one of {prec.TRAIN_PRECISIONS}, got {self.precision!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must lie in [0, 1), got {self.label_smoothing}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig keys {unknown}; valid keys are {sorted(names)}")
        return cls(**d)


# --------------------------------------------------------------------------- loss
def sequence_loss(logits: Tensor, targets: Tensor, valid_lens: Tensor,
                  label_smoothing: float = 0.0) -> tuple[Tensor, Tensor]:
    """Cross-entropy summed over real target tokens, and how many there are.

    Divide the sum by the count for the per-token mean. Unlike the book's `MaskedSoftmaxCELoss`
    (a mean over all padded steps, then over the batch) every real token — `<eos>` included — weighs
    the same however long its sentence and however much padding its batch has.

    Shape:
        logits (B, T, V) any float dtype (computed in float32); targets (B, T); valid_lens (B,).
        returns (loss_sum (), num_tokens ()).
    """
    B, T, V = logits.shape
    real = torch.arange(T, device=targets.device)[None, :] < valid_lens[:, None].to(targets.device)  # (B, T)
    # Only real positions enter the loss at all, so whatever the pad tokens or their logits are,
    # they can change neither the value nor the gradient.
    loss = F.cross_entropy(logits[real].float(), targets[real], reduction="sum",
                           label_smoothing=label_smoothing)
    return loss, real.sum()


def masked_cross_entropy(logits: Tensor, targets: Tensor, valid_lens: Tensor,
                         label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy per real target token (see `sequence_loss`)."""
    total, count = sequence_loss(logits, targets, valid_lens, label_smoothing)
    return total / count.clamp(min=1)


# --------------------------------------------------------------------------- schedule, seeds
def learning_rate(step: int, cfg: TrainConfig) -> float:
    """lr for optimizer update `step` (1-based): constant, or linear warmup to cfg.lr then
    cfg.lr * sqrt(warmup / step) — the paper's schedule with the peak set directly (as fairseq)."""
    if cfg.schedule == "constant":
        return cfg.lr
    warmup = max(1, cfg.warmup_steps)
    return cfg.lr * min(step / warmup, math.sqrt(warmup / max(step, 1)))


def seed_everything(seed: int) -> None:
    """One seed for every generator training touches (python, numpy, torch CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Generator states as tensors / plain values (loadable with torch.load(weights_only=True))."""
    py = random.getstate()
    np_state = np.random.get_state()
    state = {"python": [py[0], list(py[1]), py[2]],
             "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np_state = state["numpy"]
    np.random.set_state((np_state[0], np_state[1].numpy().astype(np.uint32), *np_state[2:]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def distributed_info() -> tuple[int, int]:
    """(rank, world_size) from an initialised torch.distributed group, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but CUDA is not available here; use --device cpu")
    return device


# --------------------------------------------------------------------------- trainer
@dataclass
class TrainResult:
    """What `Trainer.fit` reports."""

    run_dir: Path
    step: int
    epoch: int
    train_loss: float | None           # mean per-token loss of the last log window
    stop_reason: str
    best_bleu: float | None
    losses: list[float] = field(default_factory=list)  # per-step training loss of this invocation
    seconds: float = 0.0
    tokens_per_second: float = 0.0


class Trainer:
    """Train `model` on `data` (an `attnlab.data.TranslationData`), writing a run folder at `run_dir`.

    Args:
        model: a translator implementing the decoding protocol (ARCHITECTURE.md), with `.config`.
        data: vocabularies and splits; `data.settings` is saved so the splits can be rebuilt.
        config: a TrainConfig.
        run_dir: the run folder (created); None trains without writing anything (tests).
        rank, world_size: None = from torch.distributed (or 0/1).
        progress: show a tqdm bar on rank 0.
    """

    def __init__(self, model: nn.Module, data, config: TrainConfig, run_dir: str | os.PathLike | None,
                 *, rank: int | None = None, world_size: int | None = None, progress: bool = True):
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
        self.precision = prec.resolve_precision(config.precision if config.amp else "fp32", self.device, training=True)
        self.ddp_model = self.model
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp_model = DistributedDataParallel(self.model, device_ids=ids)
        opt_cls = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
        self.optimizer = opt_cls(self.model.parameters(), lr=learning_rate(1, config), betas=config.betas,
                                 eps=config.eps, weight_decay=config.weight_decay)
        # Progress through training; all of it is saved in trainer_state.pt.
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0         # batches of the current epoch already consumed (on this rank)
        self.best_bleu: float | None = None       # best validation BLEU so far (early stopping)
        self.evals_since_best = 0
        self._scores: tuple[int, dict] = (-1, {})  # (step, scores) of the latest evaluation
        self.stop_reason: str | None = None
        self.tokens_seen = 0
        self._reseed_rank()

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                "optimizer": self.optimizer.state_dict(), "rng": rng_state(),
                "best_bleu": self.best_bleu, "evals_since_best": self.evals_since_best,
                "stop_reason": self.stop_reason, "tokens_seen": self.tokens_seen,
                "schedule": {"name": self.cfg.schedule, "last_lr": self.optimizer.param_groups[0]["lr"]}}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        self.optimizer.load_state_dict(state["optimizer"])
        self.best_bleu = state["best_bleu"]
        self.evals_since_best = state["evals_since_best"]
        self.stop_reason = state["stop_reason"]
        self.tokens_seen = state["tokens_seen"]
        set_rng_state(state["rng"])  # rank 0's generators...
        self._reseed_rank()           # ...then each rank's own stream, exactly as the interrupted run had it

    def _reseed_rank(self) -> None:
        """Ranks start from one seed, so their initial weights agree; their dropout must not. Each rank
        gets its own stream, derived from (seed, rank, step) at the start and at every checkpoint, so
        a resumed multi-process run continues every rank's stream exactly."""
        if self.world_size > 1:
            seed_everything((self.cfg.seed * 1_000_003 + self.rank * 7_919 + self.step) % 2**63)

    def finished(self) -> str | None:
        """Why training is over under the current config (None if it should go on)."""
        if self.stop_reason == "early_stopping":
            return "early_stopping"
        if self.cfg.max_steps is not None and self.step >= self.cfg.max_steps:
            return "max_steps"
        if self.epoch >= self.cfg.epochs:
            return "epochs"
        return None

    # -- batches ----------------------------------------------------------------------------------
    def _batching(self) -> dict:
        c = self.cfg
        opts = dict(batch_tokens=c.batch_tokens, batch_size=c.batch_size, num_steps=c.num_steps)
        return {k: v for k, v in opts.items() if v is not None}

    def _plan(self, epoch: int) -> list[list[int]]:
        """This rank's batches (example indices) for `epoch`: a pure function of (seed, epoch)."""
        from attnlab.data import plan_batches

        return plan_batches(self.data.train, shuffle=True, seed=self.cfg.seed, epoch=epoch, rank=self.rank,
                            world_size=self.world_size, **self._batching())

    def _epoch_batches(self, epoch: int, start: int = 0) -> Iterator:
        """Batches of `epoch` from its `start`-th on (a resumed run skips without collating)."""
        from attnlab.data import collate

        for indices in self._plan(epoch)[start:]:
            yield collate(self.data.train, indices, self.data.src_vocab, self.data.tgt_vocab, self.cfg.num_steps)

    def _steps_per_epoch(self) -> int:
        return math.ceil(len(self._plan(0)) / self.cfg.grad_accum)

    # -- one update -------------------------------------------------------------------------------
    def _autocast(self):
        return prec.autocast(self.precision, self.device)

    def train_step(self, batches: list) -> tuple[float, int]:
        """One optimizer update over `batches` (gradient accumulation); returns (mean loss, tokens).

        The loss of each micro-batch is its token sum divided by the token count of *all* of them
        (on every rank), so accumulation and DDP give exactly the gradient of one big batch.
        """
        self.ddp_model.train()
        local_tokens = sum(int(b.num_tokens) for b in batches)
        total = torch.tensor([float(local_tokens)], device=self.device)
        if self.world_size > 1:
            torch.distributed.all_reduce(total)
        total_tokens = max(int(total.item()), 1)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            sync = i == len(batches) - 1 or self.world_size == 1
            ctx = self.ddp_model.no_sync() if not sync else contextlib.nullcontext()
            with ctx:
                with self._autocast():
                    logits = self.ddp_model(batch.src, batch.tgt_in, batch.src_valid_lens)
                loss, _ = sequence_loss(logits, batch.tgt_out, batch.tgt_valid_lens, self.cfg.label_smoothing)
                # DDP averages gradients over ranks; multiplying by world_size turns that into a sum.
                (loss * (self.world_size / total_tokens)).backward()
            loss_sum += loss.item()
        if self.cfg.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        lr = learning_rate(self.step + 1, self.cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        stats = torch.tensor([loss_sum], device=self.device)
        if self.world_size > 1:
            torch.distributed.all_reduce(stats)
        return stats.item() / total_tokens, total_tokens

    # -- evaluation -------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, examples=None) -> dict:
        """Validation loss (teacher forcing) and corpus BLEU of greedy/beam decoding."""
        from attnlab.data import iterate_batches
        from attnlab.metrics import corpus_bleu

        examples = self.data.valid if examples is None else examples
        if not examples:
            return {}
        self.model.eval()
        total, count = 0.0, 0
        for batch in iterate_batches(examples, self.data.src_vocab, self.data.tgt_vocab, shuffle=False,
                                     **self._batching()):
            batch = batch.to(self.device)
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in, batch.src_valid_lens)
            loss, n = sequence_loss(logits, batch.tgt_out, batch.tgt_valid_lens)
            total, count = total + loss.item(), count + int(n)
        subset = examples if self.cfg.eval_limit is None else examples[: self.cfg.eval_limit]
        translator = ckpt.Translator(self.model, self.data.src_vocab, self.data.tgt_vocab, config={},
                                     device=self.device, max_len=self.cfg.num_steps)
        hyps = translator.translate_ids([ex.src_ids for ex in subset], beam=self.cfg.eval_beam)
        refs = [ckpt.reference_text(ex.tgt_text, self.data.tgt_vocab) for ex in subset]
        return {"valid_loss": total / max(count, 1), "valid_bleu": corpus_bleu(hyps, refs)}

    # -- the loop ---------------------------------------------------------------------------------
    def fit(self) -> TrainResult:
        cfg = self.cfg
        start = time.monotonic()
        kill_at = int(os.environ.get(KILL_ENV, "0") or 0)
        losses: list[float] = []
        window_loss, window_tokens, tokens_this_run = 0.0, 0, 0
        last_window = None
        bar = self._progress_bar()
        self._log({"event": "precision", "step": self.step, **self.precision.to_dict()})
        if self.is_main and self.run_dir is not None:
            prec.record_choice(self.run_dir, self.precision)  # config.json says what `auto` picked
        stop = self.finished()
        while stop is None:
            for chunk in _chunks(self._epoch_batches(self.epoch, self.batch_in_epoch), cfg.grad_accum):
                loss, ntok = self.train_step(chunk)
                self.step += 1
                self.batch_in_epoch += len(chunk)
                self.tokens_seen += ntok
                tokens_this_run += ntok
                losses.append(loss)
                window_loss, window_tokens = window_loss + loss * ntok, window_tokens + ntok
                elapsed = time.monotonic() - start
                if self.step % cfg.log_every == 0:
                    last_window = window_loss / max(window_tokens, 1)
                    self._log({"event": "train", "step": self.step, "epoch": self.epoch, "loss": last_window,
                               "lr": self.optimizer.param_groups[0]["lr"],
                               "tokens_per_s": tokens_this_run / max(elapsed, 1e-9), "elapsed_s": elapsed})
                    window_loss, window_tokens = 0.0, 0
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_this_run / max(elapsed, 1e-9):.0f}",
                                    epoch=self.epoch)
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    self._evaluate_and_track()
                stop = self._stop_reason(start, end_of_epoch=False)
                if stop or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
                    if stop:
                        break  # the final checkpoint is written below, after the final eval
                    self.save_checkpoint()
                if kill_at and self.step == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            else:
                self.epoch += 1
                self.batch_in_epoch = 0
                stop = self._stop_reason(start, end_of_epoch=True)
        if bar is not None:
            bar.close()
        self.stop_reason = stop
        if cfg.eval_every == 0 or self.step % cfg.eval_every != 0:
            self._evaluate_and_track(final=True)
        if window_tokens:
            last_window = window_loss / window_tokens
        elapsed = time.monotonic() - start
        self._log({"event": "end", "step": self.step, "epoch": self.epoch, "stop_reason": stop,
                   "loss": last_window, "elapsed_s": elapsed})
        self.save_final()
        return TrainResult(self.run_dir, self.step, self.epoch, last_window, stop,
                           self.best_bleu, losses, elapsed,
                           tokens_this_run / max(elapsed, 1e-9))

    def _stop_reason(self, start: float, end_of_epoch: bool) -> str | None:
        reason = self.finished() if (end_of_epoch or self.stop_reason) else None
        if reason is None and self.cfg.max_steps is not None and self.step >= self.cfg.max_steps:
            reason = "max_steps"
        if reason is None and self.cfg.time_budget is not None and time.monotonic() - start >= self.cfg.time_budget:
            reason = "time_budget"
        if self.world_size > 1:
            # Ranks must stop together (a rank that stops alone would hang the others' all-reduce):
            # rank 0's clock and evaluation decide.
            code = torch.tensor([_STOP_CODES.index(reason)], device=self.device)
            torch.distributed.broadcast(code, 0)
            reason = _STOP_CODES[int(code.item())]
        return reason

    def _evaluate_and_track(self, final: bool = False) -> None:
        if not self.is_main or not self.data.valid:
            return
        scores = self.evaluate()
        bleu = scores["valid_bleu"]
        if self.best_bleu is None or bleu > self.best_bleu:
            self.best_bleu, self.evals_since_best = bleu, 0
        else:
            self.evals_since_best += 1
        if self.cfg.patience is not None and self.evals_since_best >= self.cfg.patience and not final:
            self.stop_reason = "early_stopping"
        self._log({"event": "eval", "step": self.step, "epoch": self.epoch, **scores})
        self._scores = (self.step, scores)

    def _progress_bar(self):
        if not self.progress:
            return None
        from tqdm import tqdm

        total = self._steps_per_epoch() * self.cfg.epochs
        if self.cfg.max_steps is not None:
            total = min(total, self.cfg.max_steps)
        return tqdm(total=total, initial=min(self.step, total), desc="train", unit="step", dynamic_ncols=True)

    # -- writing the run folder (rank 0 only) -----------------------------------------------------
    def _log(self, event: dict) -> None:
        if self.is_main and self.run_dir is not None:
            ckpt.append_jsonl(self.run_dir / "log.jsonl", {"time": time.time(), **event})

    def save_checkpoint(self) -> None:
        self._reseed_rank()  # on every rank, before rank 0 saves its generator state
        if not self.is_main or self.run_dir is None:
            return
        # Only a score measured at this very step may rank this checkpoint among the best.
        scored_step, scores = self._scores
        scores = scores if scored_step == self.step else {}
        meta = {"step": self.step, "epoch": self.epoch, "stop_reason": self.stop_reason,
                "valid_bleu": scores.get("valid_bleu"), "valid_loss": scores.get("valid_loss")}
        ckpt.save_checkpoint(self.run_dir, self.step, self.model, self.state_dict(), meta)
        ckpt.prune_checkpoints(self.run_dir, self.cfg.keep_last, self.cfg.keep_best)

    def save_final(self) -> None:
        """Final weights at the run root, then a checkpoint that marks the run finished."""
        if not self.is_main or self.run_dir is None:
            return
        ckpt.save_weights(self.model, self.run_dir / "model.safetensors")
        self.save_checkpoint()


_STOP_CODES = [None, "max_steps", "epochs", "time_budget", "early_stopping"]


def _chunks(iterable, size: int) -> Iterator[list]:
    it = iter(iterable)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


# --------------------------------------------------------------------------- whole runs
def load_data(data_config: Mapping[str, Any]):
    """Rebuild a run's data from its saved settings (`loader` + the loader's keyword arguments)."""
    from attnlab.data import load_d2l_data, load_translation_data

    opts = dict(data_config)
    loader = opts.pop("loader", "translation")
    if loader == "d2l":
        return load_d2l_data(**opts)
    if loader == "translation":
        return load_translation_data(**opts)
    raise ValueError(f"unknown data loader {loader!r}; expected 'd2l' or 'translation'")


def train_run(model_type: str, model_config: Mapping[str, Any], train_config: TrainConfig,
              data_config: Mapping[str, Any], run_dir: str | os.PathLike | None, *,
              progress: bool = True) -> TrainResult:
    """Load data, build the model (vocabulary sizes from the data), write the run's config and
    vocabularies, and train. The one seed is set before the model is initialised."""
    from attnlab.models import build_model

    data_config = dict(data_config)
    if data_config.get("loader", "translation") == "translation":
        data_config.setdefault("seed", train_config.seed)  # the split follows --seed unless fixed
    seed_everything(train_config.seed)
    data = load_data(data_config)
    # Record the resolved file so `evaluate` rebuilds the same test split without --data.
    data_config["path"] = data.settings.get("data_path", data_config.get("path"))
    model_config = {**model_config, "src_vocab_size": len(data.src_vocab), "tgt_vocab_size": len(data.tgt_vocab)}
    seed_everything(train_config.seed)
    model = build_model(model_type, model_config)
    rank, _ = distributed_info()
    if run_dir is not None and rank == 0:
        if ckpt.list_checkpoints(run_dir) or (Path(run_dir) / ckpt.WEIGHTS_FILE).exists():
            raise ValueError(f"{run_dir} already holds a run; continue it with --resume {run_dir} "
                             f"or choose another --out")
        ckpt.write_run_config(run_dir, model_type, model.config.to_dict(), train_config.to_dict(),
                              data_config, data.src_vocab, data.tgt_vocab)
    return Trainer(model, data, train_config, run_dir, progress=progress).fit()


def resume_run(run_dir: str | os.PathLike, overrides: Mapping[str, Any] | None = None, *,
               progress: bool = True) -> TrainResult | str:
    """Continue a run from its newest checkpoint. Returns the TrainResult, or the reason (a string)
    when the run had already finished under its (possibly overridden) limits."""
    from attnlab.data import load_vocab
    from attnlab.models import build_model

    run_dir = Path(run_dir)
    cfg = ckpt.read_run_config(run_dir)
    ckpts = ckpt.list_checkpoints(run_dir)
    if not ckpts:
        raise FileNotFoundError(f"{run_dir / ckpt.CHECKPOINTS} holds no checkpoint to resume from; "
                                f"the run stopped before its first one — start it again")
    last = ckpts[-1]
    train_config = TrainConfig.from_dict({**cfg["train"], **(overrides or {})})
    data = load_data(cfg["data"])
    for side, fname in (("src", ckpt.SRC_VOCAB_FILE), ("tgt", ckpt.TGT_VOCAB_FILE)):
        if load_vocab(run_dir / fname) != getattr(data, f"{side}_vocab"):
            raise ValueError(f"the data rebuilt from {run_dir / ckpt.CONFIG_FILE} gives a different {side} "
                             f"vocabulary than {run_dir / fname}; was the data file changed?")
    model = build_model(cfg["model_type"], cfg["model"])
    ckpt.load_weights(model, last / ckpt.WEIGHTS_FILE, what=str(run_dir / ckpt.CONFIG_FILE))
    trainer = Trainer(model, data, train_config, run_dir, progress=progress)
    trainer.load_state_dict(ckpt.load_trainer_state(last))
    trainer.stop_reason = None if trainer.stop_reason == "time_budget" else trainer.stop_reason
    done = trainer.finished()
    if done is not None:
        return done
    if overrides and trainer.is_main:
        ckpt.write_json(run_dir / ckpt.CONFIG_FILE, {**cfg, "train": train_config.to_dict()})
    trainer._log({"event": "resume", "step": trainer.step, "from": last.name})
    return trainer.fit()
