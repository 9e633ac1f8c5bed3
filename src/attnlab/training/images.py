"""Training and scoring image classifiers (the Vision Transformer): whole runs, as `train_run` is for translators.

    train_image_run(model_config, train_config, {"loader": "digits"}, "runs/vit")   # config.json, model.safetensors
    model, cfg = load_image_run("runs/vit"); accuracy(model, load_run_images(cfg).test)

The loop is a plain one (a ViT on the digits trains in a minute): shuffled batches of `batch_size`
images, cross-entropy, AdamW with the translators' warmup schedule and parameter groups, the same
`StopPolicy` (epochs, steps, time budget, Ctrl-C), validation accuracy after every epoch. The run
folder holds config.json, model.safetensors and log.jsonl; it has no checkpoints to resume from.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.data.images import ImageData, ImageSplit, check_image_data_config, load_image_data
from attnlab.models import CONFIGS, ViT, build_model
from attnlab.runs.config import read_run_config
from attnlab.runs.layout import CONFIG_FILE, WEIGHTS_FILE
from attnlab.runs.outputs import claim_output, start_in_place
from attnlab.runs.weights import check_weights, load_weights, save_weights
from attnlab.training.config import TrainConfig
from attnlab.training.optim import build_optimizer, learning_rate
from attnlab.training.progress import Progress
from attnlab.training.state import RunWriter
from attnlab.training.stop import StopPolicy
from attnlab.utils.files import write_json
from attnlab.utils.runtime import intra_op_threads, resolve_device, seed_everything

IMAGE_MODELS = ("vit",)


@dataclass
class ImageTrainResult:
    """What `train_image_run` reports."""

    run_dir: Path | None
    step: int
    epoch: int
    train_loss: float | None  # mean loss of the last epoch's batches
    valid_accuracy: float | None
    stop_reason: str
    seconds: float
    exit_code: int = 0  # 0, or 128 + the signal that stopped it (the weights are saved either way)


def image_model_config(model_config: Mapping[str, Any], data: ImageData) -> dict:
    """The model config with what the data decides: classes, channels, height and width."""
    c, h, w = data.image_shape
    return {**model_config, "num_classes": len(data.classes), "channels": c, "image_height": h, "image_width": w}


def check_image_configs(model_type: str, model_config: Mapping[str, Any], data_config: Mapping[str, Any]) -> None:
    """Validate the settings of an image run before any file is read (the data fills its sizes later)."""
    if model_type not in IMAGE_MODELS:
        raise ValueError(f"{model_type!r} is not an image model; expected one of {IMAGE_MODELS}")
    check_image_data_config(data_config)
    if data_config.get("loader", "digits") == "digits":  # the sizes are known: check the patch size now
        CONFIGS[model_type].from_dict({**model_config, "image_height": 8, "image_width": 8, "channels": 1})
    else:  # a folder's image size is known once it is read: meanwhile check the rest with one patch per image
        p = model_config.get("patch_size", 2)
        p = p if isinstance(p, int) and not isinstance(p, bool) and p > 0 else 1
        CONFIGS[model_type].from_dict({**model_config, "image_height": p, "image_width": p})


def _batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


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


def train_images(
    model: nn.Module, data: ImageData, cfg: TrainConfig, run_dir: Path | None = None, progress: bool = False
) -> ImageTrainResult:
    """Train `model` on data.train until cfg's limits; validation accuracy after every epoch."""
    device = resolve_device(cfg.device)
    model.to(device)
    optimizer = build_optimizer(model, cfg)
    stop = StopPolicy(cfg, device)
    batch_size = cfg.batch_size or 64
    step, epoch, last_loss, valid_acc, reason = 0, 0, None, None, None
    steps_per_epoch = math.ceil(len(data.train) / batch_size)
    total = steps_per_epoch * cfg.epochs if cfg.max_steps is None else min(cfg.max_steps, steps_per_epoch * cfg.epochs)
    bar = Progress(total) if progress else None
    log = RunWriter(run_dir, 0, 0).log  # log.jsonl, or nothing without a run folder
    start = stop.start = time.monotonic()
    with intra_op_threads(cfg.threads), stop.catching_signals():
        while reason is None:
            model.train()
            losses = []
            for idx in _batches(len(data.train), batch_size, cfg.seed, epoch):
                x = torch.from_numpy(data.train.images[idx]).to(device)
                y = torch.from_numpy(data.train.labels[idx]).to(device)
                loss = F.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                value = loss.item()
                if not math.isfinite(value):
                    reason = stop.diverged()
                    break
                if cfg.grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                step += 1
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(step, cfg)
                optimizer.step()
                losses.append(value)
                if step % cfg.log_every == 0:
                    log({"event": "train", "step": step, "epoch": epoch, "loss": value})
                if bar is not None:
                    bar.update(step, loss=f"{value:.3f}", epoch=epoch)
                if reason := stop.after_step(step, epoch):
                    break
            else:
                epoch += 1
                reason = stop.after_epoch(step, epoch)
            last_loss = float(np.mean(losses)) if losses else last_loss
            if reason != "non_finite_loss" and len(data.valid):
                valid_acc = accuracy(model, data.valid, device)
                log({"event": "eval", "step": step, "epoch": epoch, "valid_accuracy": valid_acc})
    if bar is not None:
        bar.close()
    seconds = time.monotonic() - start
    log({"event": "end", "step": step, "epoch": epoch, "stop_reason": reason, "loss": last_loss, "elapsed_s": seconds})
    exit_code = {"signal": stop.exit_code, "non_finite_loss": 1}.get(str(reason), 0)
    if run_dir is not None and reason != "non_finite_loss":
        save_weights(model, run_dir / WEIGHTS_FILE)
    return ImageTrainResult(run_dir, step, epoch, last_loss, valid_acc, str(reason), seconds, exit_code)


def train_image_run(
    model_type: str,
    model_config: Mapping[str, Any],
    train_config: TrainConfig,
    data_config: Mapping[str, Any],
    run_dir: str | os.PathLike | None,
    *,
    progress: bool = True,
    force: bool = False,
) -> ImageTrainResult:
    """Check everything, load the images, build the model (sizes from the data), write config.json, train."""
    data_config = dict(data_config)
    check_image_configs(model_type, model_config, data_config)
    claim = claim_output(run_dir, "run", force=force) if run_dir is not None else None
    data = load_image_data(data_config)
    model_config = image_model_config(model_config, data)
    seed_everything(train_config.seed)
    model = build_model(model_type, model_config)
    path = None
    if claim is not None:
        path = start_in_place(claim_output(claim.path, "run", force=force))  # again: loading took a while
        write_json(
            path / CONFIG_FILE,
            {
                "model_type": model_type,
                "model": model.config.to_dict(),
                "train": train_config.to_dict(),
                "data": {**data.settings, "classes": data.classes},
            },
        )
    return train_images(model, data, train_config, path, progress)


def load_image_run(run_dir: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[ViT, dict]:
    """(model with its final weights, config.json) of an image run; ValueError for a run of another kind."""
    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    if cfg["model_type"] not in IMAGE_MODELS:
        raise ValueError(
            f"{run_dir} is a {cfg['model_type']} run (a translator), not an image classifier; "
            f"pass a run of `attnlab train --model vit`"
        )
    with torch.device("meta"):
        skeleton = build_model(cfg["model_type"], cfg["model"])
    weights = run_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} is missing: the run folder has no final weights {WEIGHTS_FILE}")
    check_weights(skeleton, weights, str(run_dir / CONFIG_FILE), config=cfg["model"])
    model = build_model(cfg["model_type"], cfg["model"])
    load_weights(model, weights, str(run_dir / CONFIG_FILE))
    device = device if isinstance(device, torch.device) else resolve_device(device)
    return model.to(device).eval(), cfg


def load_run_images(cfg: Mapping[str, Any], data_path: str | None = None) -> ImageData:
    """The images an image run was trained on, rebuilt from its config.json (`data_path`: the folder moved).
    Raises ValueError when their classes or size are not the run's."""
    settings = {k: v for k, v in cfg.get("data", {}).items() if k != "classes"}
    if data_path:
        settings = {"loader": "folder", "path": data_path}
    data = load_image_data(settings)
    model = cfg["model"]
    expected = (model.get("channels"), model.get("image_height"), model.get("image_width"))
    if data.image_shape != expected or data.classes != cfg.get("data", {}).get("classes", data.classes):
        raise ValueError(
            f"the images at {settings.get('path', 'digits')} (shape {data.image_shape}, classes {data.classes[:5]}) "
            f"are not those the run was trained on (shape {expected}); pass its image folder with --data"
        )
    return data


__all__ = [
    "IMAGE_MODELS",
    "ImageTrainResult",
    "accuracy",
    "check_image_configs",
    "image_model_config",
    "load_image_run",
    "load_run_images",
    "predict",
    "train_image_run",
    "train_images",
]
