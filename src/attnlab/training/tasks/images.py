"""Image classification (the Vision Transformer): images and labels, cross-entropy per image, validation
accuracy. The data is scikit-learn's 8x8 digits or a folder of same-size images (`attnlab.data.images`).

    train_run("vit", model_config, train_config, {"loader": "digits"}, "runs/vit")   # through the Trainer
    model, cfg = load_model("runs/vit"); accuracy(model, run_images("runs/vit", cfg).test)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab import __version__
from attnlab.data.images import ImageData, ImageSplit, check_image_data_config, load_image_data
from attnlab.models import CONFIGS
from attnlab.runs.layout import CONFIG_FILE
from attnlab.training.tasks.base import Task
from attnlab.utils.files import write_json

DEFAULT_BATCH = 64  # images per batch when a config gives batch_tokens only


@dataclass
class ImageBatch:
    """images (B, C, H, W) float32, labels (B,) int64."""

    images: Tensor
    labels: Tensor

    def to(self, device) -> ImageBatch:
        return ImageBatch(self.images.to(device), self.labels.to(device))


def check_image_configs(model_type: str, model_config: Mapping[str, Any], data_config: Mapping[str, Any]) -> None:
    """Validate the settings of an image run before any file is read (the data fills its sizes later)."""
    if model_type not in IMAGES.model_types:
        raise ValueError(f"{model_type!r} is not an image model; expected one of {IMAGES.model_types}")
    check_image_data_config(data_config)
    if data_config.get("loader", "digits") == "digits":  # the sizes are known: check the patch size now
        CONFIGS[model_type].from_dict({**model_config, "image_height": 8, "image_width": 8, "channels": 1})
    else:  # a folder's image size is known once it is read: meanwhile check the rest with one patch per image
        p = model_config.get("patch_size", 2)
        p = p if isinstance(p, int) and not isinstance(p, bool) and p > 0 else 1
        CONFIGS[model_type].from_dict({**model_config, "image_height": p, "image_width": p})


@torch.no_grad()
def predict(model: nn.Module, split: ImageSplit, device="cpu", batch_size: int = 512) -> np.ndarray:
    """Predicted labels (N,) of a split's images."""
    was_training = model.training
    model.eval()
    out = []
    try:
        for i in range(0, len(split), batch_size):
            x = torch.from_numpy(split.images[i : i + batch_size]).to(device)
            out.append(model(x).argmax(dim=-1).cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def accuracy(model: nn.Module, split: ImageSplit, device="cpu") -> float:
    """Fraction of a split's images classified correctly."""
    if not len(split):
        raise ValueError("the split holds no images; score another split")
    return float((predict(model, split, device) == split.labels).mean())


class ImageTask(Task):
    """Labelled images of one size; shuffled batches of `batch_size` images."""

    name = "images"
    model_types = ("vit",)
    metric = "valid_accuracy"
    metric_label, metric_format, unit = "valid accuracy", ".3f", "images"
    multi_process = False  # one process: the digits train in a minute

    def check(self, model_type, model_config, data_config, train_seed, asked=None, names=None) -> dict:
        names = names or {}
        wrong = [names.get(k, f"--set data.{k}") for k in (asked or {}) if k != "path"]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: not for image runs (--data DIR picks the images)")
        data = dict(data_config)
        if "path" in data:  # --data DIR: a folder of images, one subfolder per class
            data = {"loader": "folder", "path": data["path"]}
        check_image_configs(model_type, model_config, data)
        return data

    def load(self, data_config) -> ImageData:
        return load_image_data({k: v for k, v in data_config.items() if k != "classes"})

    def recorded(self, data_config, data: ImageData) -> dict:
        return {**data.settings, "classes": data.classes}

    def sized(self, model_config, data: ImageData) -> dict:
        c, h, w = data.image_shape
        return {**model_config, "num_classes": len(data.classes), "channels": c, "image_height": h, "image_width": w}

    def write_run(self, run_dir, model_type, model, train, data_config, data) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        config = {"model_type": model_type, "model": model, "train": train, "data": data_config}
        write_json(run_dir / CONFIG_FILE, {**config, "attnlab_version": __version__})

    def check_rebuilt(self, run_dir: str | os.PathLike, cfg, data: ImageData) -> None:
        model, recorded = cfg["model"], cfg.get("data", {})
        expected = (model.get("channels"), model.get("image_height"), model.get("image_width"))
        if data.image_shape != expected or data.classes != recorded.get("classes", data.classes):
            raise ValueError(
                f"the images at {data.settings.get('path', 'digits')} (shape {data.image_shape}, classes "
                f"{data.classes[:5]}) are not those {run_dir} was trained on (shape {expected}); pass its image "
                f"folder with --data"
            )

    def moved(self, data_config, data_path: str) -> dict:
        return {"loader": "folder", "path": data_path}

    def plan(self, split: ImageSplit, cfg, epoch, rank, world_size):
        size = cfg.batch_size or DEFAULT_BATCH
        order = np.random.default_rng([cfg.seed, epoch]).permutation(len(split))
        return [order[i : i + size][rank::world_size] for i in range(0, len(order), size)]

    def collate(self, data, split: ImageSplit, indices, cfg) -> ImageBatch:
        idx = np.asarray(indices)
        return ImageBatch(torch.from_numpy(split.images[idx]), torch.from_numpy(split.labels[idx]))

    def units(self, batch: ImageBatch) -> int:
        return len(batch.labels)

    def loss(self, model: nn.Module, batch: ImageBatch, label_smoothing: float) -> Tensor:
        logits = model(batch.images).float()
        return F.cross_entropy(logits, batch.labels, reduction="sum", label_smoothing=label_smoothing)

    @torch.no_grad()
    def evaluate(self, model, data, examples: ImageSplit, cfg, device, autocast, batching) -> dict:
        if not len(examples):
            return {}
        model.eval()
        total = 0.0
        for i in range(0, len(examples), 512):
            batch = self.collate(data, examples, range(i, min(i + 512, len(examples))), cfg).to(device)
            with autocast():
                total += float(self.loss(model, batch, 0.0))
        return {"valid_loss": total / len(examples), "valid_accuracy": accuracy(model, examples, device)}


IMAGES = ImageTask()


def run_images(run_dir: str | os.PathLike, cfg: Mapping[str, Any], data_path: str | None = None) -> ImageData:
    """The images an image run was trained on, rebuilt from its config.json (`data_path`: the folder moved).
    Raises ValueError when their classes or size are not the run's."""
    settings = dict(cfg.get("data", {}))
    data = IMAGES.load(IMAGES.moved(settings, data_path) if data_path else settings)
    IMAGES.check_rebuilt(run_dir, cfg, data)
    return data
