"""Training a seq2seq model: TrainConfig, the Trainer and the record of where a run is, the stop policy,
optimizer, loss, presets, progress, validation, and whole runs (train_run, resume_run).
"""

from .config import TrainConfig
from .launch import (
    Say,
    check_model_config,
    claim_run_dir,
    load_run_data,
    newest_intact_checkpoint,
    resume_run,
    train_run,
)
from .loss import masked_cross_entropy, sequence_loss, target_mask
from .optim import build_optimizer, learning_rate, param_groups
from .presets import DEFAULT_PRESET, PRESETS, get_preset
from .progress import PLAIN_EVERY_S, LossWindow, Progress
from .state import Checkpointing, RunWriter, TrainState, weights_finite
from .stop import REASONS, StopPolicy
from .trainer import Trainer, TrainResult
from .validation import validation_scores

__all__ = [
    "TrainConfig",
    "target_mask",
    "sequence_loss",
    "masked_cross_entropy",
    "learning_rate",
    "param_groups",
    "build_optimizer",
    "REASONS",
    "StopPolicy",
    "PLAIN_EVERY_S",
    "Progress",
    "LossWindow",
    "weights_finite",
    "RunWriter",
    "TrainState",
    "Checkpointing",
    "validation_scores",
    "TrainResult",
    "Trainer",
    "PRESETS",
    "DEFAULT_PRESET",
    "get_preset",
    "Say",
    "claim_run_dir",
    "check_model_config",
    "train_run",
    "load_run_data",
    "newest_intact_checkpoint",
    "resume_run",
]
