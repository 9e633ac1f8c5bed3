"""What a task gives the one `Trainer` and the whole-run functions (fairseq's `tasks/`): its settings'
checks, its data, its batches, its loss and its validation metric. A new kind of model trains through
the same loop, checkpoints, resume and run folder once it has a task.

    task = task_for("vit")                      # the task of a model type (`TASKS`)
    data = task.load(task.check("vit", model, data_config, train))
    Trainer(build_model("vit", task.sized(model, data)), data, train, "runs/vit", task=task).fit()
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn


class Task:
    """The part of training that depends on what is learnt. Subclasses set the class attributes and
    implement every method; none holds state, so one instance serves every run.

    Attributes:
        name: the task's name ("translation", "images").
        model_types: the model types (`attnlab.models.CONFIGS`) it trains.
        metric: the validation score (higher is better) that feeds patience and ranks the best checkpoints.
        metric_label, metric_format: how a report names and formats that score ("valid BLEU", ".2f").
        unit: what the loss sums over, plural ("tokens", "images"): a report's throughput is per unit.
        multi_process: whether it trains in several processes (DDP) as well as in one.
    """

    name: str = ""
    model_types: tuple[str, ...] = ()
    metric: str = ""
    metric_label: str = ""
    metric_format: str = ".4f"
    unit: str = ""
    multi_process: bool = True

    def check(
        self,
        model_type: str,
        model_config: Mapping[str, Any],
        data_config: Mapping[str, Any],
        train_seed: int,
        asked: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> dict:
        """Validate the settings before any file is read; return the data settings as a run records them.
        `asked`: the data settings given as flags or overrides (not a preset's), `names` their flags."""
        raise NotImplementedError

    def load(self, data_config: Mapping[str, Any]):
        """The data of `data_config`: an object with `train` and `valid` splits and `settings`."""
        raise NotImplementedError

    def recorded(self, data_config: Mapping[str, Any], data) -> dict:
        """The data settings config.json keeps, once the data is read (the resolved file, the classes)."""
        raise NotImplementedError

    def sized(self, model_config: Mapping[str, Any], data) -> dict:
        """The model config with what the data decides (vocabulary sizes, classes, image size)."""
        raise NotImplementedError

    def write_run(self, run_dir: str | os.PathLike, model_type: str, model: dict, train: dict, data_config: dict, data):
        """The run's config.json and whatever else a run of this task keeps beside it (vocabularies)."""
        raise NotImplementedError

    def check_rebuilt(self, run_dir: str | os.PathLike, cfg: Mapping[str, Any], data) -> None:
        """ValueError when data rebuilt from a run's config.json is not the data the run was trained on."""
        raise NotImplementedError

    def moved(self, data_config: Mapping[str, Any], data_path: str) -> dict:
        """The run's data settings with its data read from `data_path` instead (the data moved)."""
        raise NotImplementedError

    def plan(self, split, cfg, epoch: int, rank: int, world_size: int) -> Sequence[Sequence[int]]:
        """This rank's batches (example indices) of `epoch`: a pure function of (cfg.seed, epoch)."""
        raise NotImplementedError

    def collate(self, data, split, indices: Sequence[int], cfg):
        """One batch (an object with `.to(device)`) of the examples `indices` of `split`."""
        raise NotImplementedError

    def units(self, batch) -> int:
        """What the loss of `batch` sums over (real target tokens, images): the normaliser."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch, label_smoothing: float) -> Tensor:
        """The loss of `batch` summed over its units, a () float tensor with the graph."""
        raise NotImplementedError

    def evaluate(
        self, model: nn.Module, data, examples, cfg, device: torch.device, autocast: Callable, batching: dict
    ) -> dict:
        """Validation scores of `model` on `examples` ({} when there are none); holds `metric`."""
        raise NotImplementedError
