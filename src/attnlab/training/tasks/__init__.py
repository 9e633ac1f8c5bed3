"""Tasks: what the one Trainer needs to know about what is learnt (data, batches, loss, metric)."""

from .base import Task
from .images import IMAGES, ImageBatch, ImageTask, accuracy, check_image_configs, predict, run_images
from .registry import TASKS, task_for
from .translation import TRANSLATION, TranslationTask, batch_options, check_model_config

__all__ = [
    "IMAGES",
    "TASKS",
    "TRANSLATION",
    "ImageBatch",
    "ImageTask",
    "Task",
    "TranslationTask",
    "accuracy",
    "batch_options",
    "check_image_configs",
    "check_model_config",
    "predict",
    "run_images",
    "task_for",
]
