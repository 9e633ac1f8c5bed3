"""`TrainConfig`: how to train, saved in a run's config.json (`train`); every field checked on creation;
`RESUMABLE`, the fields a resumed run may change."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from attnlab.inference.precision import TRAIN_PRECISIONS
from attnlab.utils.checks import check_field_types, check_range
from attnlab.utils.runtime import resolve_device

SCHEDULES = ("inverse_sqrt", "constant", "linear", "cosine")  # TrainConfig.schedule's names
# Schedules that decay to zero at the end of the run (Li et al., "Budgeted Training", ICLR 2020): they need
# to know where the end is (a time budget or a step limit).
BUDGETED_SCHEDULES = ("linear", "cosine")

# Fields a resumed run may change (its limits); the rest must stay as the run was started.
RESUMABLE = frozenset(
    {
        "epochs",
        "max_steps",
        "time_budget",
        "eval_every",
        "checkpoint_every",
        "keep_best",
        "keep_last",
        "average_last",
        "patience",
        "device",
        "log_every",
        "precision",
        "threads",
        "compile",
    }
)


def check_resumable(overrides: Mapping[str, Mapping[str, Any]]) -> None:
    """ValueError naming the settings of `overrides` ({"model", "train", "data"} sections) that a resumed
    run cannot change: every model and data setting, and train settings outside `RESUMABLE`."""
    train = overrides.get("train", {})
    bad = sorted(k for k in train if k not in RESUMABLE)
    bad += sorted(overrides.get("data", {})) + sorted(overrides.get("model", {}))
    if bad:
        raise ValueError(
            f"--resume continues a run as it was started; these cannot change: {bad}. Allowed: {sorted(RESUMABLE)}"
        )


@dataclass
class TrainConfig:
    """How to train; saved in the run's config.json (`train`) and restored by `--resume`."""

    seed: int = 0  # one seed for python, numpy, torch (init, dropout) and batch order
    epochs: int = 10  # passes over the training split (stop at whichever limit comes first)
    max_steps: int | None = None  # optimizer updates; None = no step limit
    time_budget: float | None = None  # seconds of training per invocation; None = no limit
    batch_tokens: int | None = 4096  # target tokens per batch (token-count batching); None = use batch_size
    batch_size: int | None = None  # sentences per batch (the book's fixed-size batches)
    num_steps: int | None = None  # pad/truncate every sequence to this length (the book's shapes)
    grad_accum: int = 1  # batches whose gradients add up to one optimizer update
    optimizer: str = "adam"  # 'adam' or 'adamw'
    lr: float = 1e-3  # peak learning rate (after warmup) or the constant rate
    schedule: str = "inverse_sqrt"  # 'inverse_sqrt' (warmup, then lr*sqrt(warmup/step)), 'constant', or
    # 'linear' / 'cosine': warmup, then a decay to zero at the end of the run (its time budget or max_steps)
    warmup_steps: int = 400  # linear warmup length (every schedule but 'constant')
    betas: tuple[float, float] = (0.9, 0.98)  # Adam betas (the Transformer paper's 0.98)
    eps: float = 1e-9  # Adam epsilon (the paper's)
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam
    label_smoothing: float = 0.0  # mass spread uniformly over the vocabulary (paper: 0.1)
    grad_clip: float | None = 1.0  # max global gradient norm; None = no clipping
    eval_every: int = 0  # steps between validation loss + BLEU; 0 = only at the end
    eval_limit: int | None = 500  # validation sentences decoded for BLEU (None = all)
    eval_beam: int = 1  # beam for validation BLEU (1 = greedy)
    checkpoint_every: int = 0  # steps between checkpoints; 0 = only at the end
    keep_last: int = 5  # newest checkpoints kept (for average_last, and `attnlab average --last K`)
    keep_best: int = 1  # checkpoints kept for the best validation BLEU
    average_last: int = 0  # K >= 2: a finished run's final weights are the mean of them and the K-1 newest
    # checkpoints (attnlab.training.averaging; the final checkpoint keeps the weights as trained); 0 = off
    patience: int | None = None  # stop after this many evaluations without a better BLEU
    precision: str = "fp32"  # 'fp32' (reproducible everywhere), 'bf16' (autocast), 'auto' (attnlab.inference.precision)
    log_every: int = 10  # steps between 'train' events in log.jsonl
    device: str = "auto"  # 'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ...
    compile: bool = False  # forward and backward through torch.compile (faster on a GPU once compiled; the
    # first steps of each new batch shape pay the compilation)
    threads: int | None = None  # torch intra-op threads while training; None = torch's default (the cores).
    # The same seed gives the same weights only at the same thread count (float sums split differently).

    def __post_init__(self):
        check_field_types(self)
        self.betas = tuple(self.betas)  # type: ignore[assignment]  # JSON has no tuples; each beta is checked below
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(map(repr, SCHEDULES))}, got {self.schedule!r}")
        if self.schedule in BUDGETED_SCHEDULES and self.time_budget is None and self.max_steps is None:
            raise ValueError(
                f"schedule {self.schedule!r} decays to zero at the end of the run: set time_budget or max_steps "
                "(got neither)"
            )
        if self.optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
        if self.batch_tokens is None and self.batch_size is None:
            raise ValueError("set batch_tokens (tokens per batch) or batch_size (sentences per batch)")
        # (field, lowest, highest, None allowed): every number has a meaningful range.
        for name, lo, hi, none_ok in (
            ("seed", 0, 2**63 - 1, False),
            ("epochs", 1, None, False),
            ("max_steps", 1, None, True),
            ("batch_tokens", 1, None, True),
            ("batch_size", 1, None, True),
            ("num_steps", 2, None, True),
            ("grad_accum", 1, None, False),
            ("warmup_steps", 0, None, False),
            ("eval_every", 0, None, False),
            ("eval_limit", 1, None, True),
            ("eval_beam", 1, 64, False),
            ("checkpoint_every", 0, None, False),
            ("keep_last", 1, None, False),
            ("keep_best", 0, None, False),
            ("average_last", 0, None, False),
            ("patience", 1, None, True),
            ("log_every", 1, None, False),
            ("threads", 1, None, True),
            ("lr", 0.0, None, False),
            ("weight_decay", 0.0, None, False),
        ):
            check_range(f"TrainConfig.{name}", getattr(self, name), lo, hi, none_ok=none_ok)
        check_range("TrainConfig.grad_clip", self.grad_clip, 0.0, None, none_ok=True, lo_open=True)
        check_range("TrainConfig.time_budget", self.time_budget, 0.0, None, none_ok=True, lo_open=True)
        check_range("TrainConfig.eps", self.eps, 0.0, None, lo_open=True)
        check_range("TrainConfig.label_smoothing", self.label_smoothing, 0.0, 1.0, hi_open=True)
        for i, beta in enumerate(self.betas):
            check_range(f"TrainConfig.betas[{i}]", beta, 0.0, 1.0, hi_open=True)
        if self.average_last == 1:
            raise ValueError("TrainConfig.average_last must be 0 (off) or at least 2 (weights averaged), got 1")
        if self.average_last and self.keep_last < self.average_last - 1:
            raise ValueError(
                f"average_last={self.average_last} averages the final weights with the {self.average_last - 1} "
                f"newest checkpoints before them, but keep_last={self.keep_last} keeps fewer; set keep_last to at "
                f"least {self.average_last - 1}"
            )
        resolve_device(self.device)  # a device this machine has, before anything is written
        if self.precision not in TRAIN_PRECISIONS:
            raise ValueError(f"TrainConfig.precision must be one of {TRAIN_PRECISIONS}, got {self.precision!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig keys {unknown}; valid keys are {sorted(names)}")
        check_field_types(cls, d)
        return cls(**d)
