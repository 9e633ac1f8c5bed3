"""The tasks by name, and the task of each model type."""

from __future__ import annotations

from attnlab.training.tasks.base import Task
from attnlab.training.tasks.images import IMAGES
from attnlab.training.tasks.translation import TRANSLATION

TASKS: dict[str, Task] = {task.name: task for task in (TRANSLATION, IMAGES)}


def task_for(model_type: str) -> Task:
    """The task that trains `model_type`; ValueError naming the model types there are."""
    for task in TASKS.values():
        if model_type in task.model_types:
            return task
    known = sorted(m for task in TASKS.values() for m in task.model_types)
    raise ValueError(f"unknown model type {model_type!r}; expected one of {known}")
