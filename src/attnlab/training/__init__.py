"""Training any model through its task (translation, images): TrainConfig, the settings a run resolves
(presets, config files, overrides), the Trainer and the record of where a run is, the stop policy,
optimizer, loss, presets, progress, validation, and whole runs (train_run, resume_run).
"""

from .config import RESUMABLE, TrainConfig, check_resumable
from .launch import (
    Say,
    claim_run_dir,
    claim_tensorboard_dir,
    load_run_data,
    newest_intact_checkpoint,
    resume_run,
    train_run,
)
from .loss import masked_cross_entropy, sequence_loss, target_mask
from .optim import build_optimizer, learning_rate, param_groups
from .presets import DEFAULT_PRESET, PRESETS, get_preset
from .progress import PLAIN_EVERY_S, LossWindow, Progress
from .settings import Settings, resolve
from .state import Checkpointing, RunWriter, TrainResult, TrainState, weights_finite
from .stop import REASONS, StopPolicy
from .tasks import TASKS, Task, check_model_config, task_for
from .trainer import Trainer
from .validation import validation_scores

__all__ = [
    "RESUMABLE",
    "TrainConfig",
    "check_resumable",
    "Settings",
    "resolve",
    "TASKS",
    "Task",
    "task_for",
    "claim_tensorboard_dir",
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
