"""The weights file of a saved MarianMTModel (model.safetensors or pytorch_model.bin), read for
`attnlab.export.hf.import_hf`: tensor shapes without the data first (the safetensors header, a
memory-mapped .bin), so a config can be checked before anything is allocated; then the tensors.
A pickle is never executed (`torch.load(weights_only=True)`), and a damaged or hostile file is one
ValueError naming it and what to do.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor


def weights_file(source: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (source / name).is_file():
            return source / name
    raise FileNotFoundError(
        f"{source} holds neither model.safetensors nor pytorch_model.bin; pass the folder "
        f"written by MarianMTModel.save_pretrained (or `huggingface-cli download`)"
    )


def _damaged(path: Path, exc: BaseException) -> ValueError:
    fix = (
        "download the model again"
        if path.suffix == ".safetensors"
        else "save the model as model.safetensors (save_pretrained(..., safe_serialization=True)) and import that"
    )
    if isinstance(exc, pickle.UnpicklingError):
        return ValueError(
            f"{path} holds objects other than tensors, which attnlab never unpickles (they could run code); {fix}"
        )
    why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    return ValueError(f"{path} cannot be read as model weights ({type(exc).__name__}: {why}); {fix}")


def _load_bin(path: Path, mmap: bool) -> dict[str, Tensor]:
    # weights_only: a pickle that holds anything but tensors is refused, never executed.
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing the file
            warnings.simplefilter("ignore", UserWarning)
            try:
                weights = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError as exc:
                if not mmap or "mmap" not in str(exc):
                    raise
                weights = torch.load(path, map_location="cpu", weights_only=True)  # the pre-zip format
    except Exception as exc:
        raise _damaged(path, exc) from exc
    if not isinstance(weights, dict) or not all(isinstance(v, Tensor) for v in weights.values()):
        raise _damaged(path, TypeError("it holds no {name: tensor} state dict"))
    return weights


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of a weights file without reading its data (safetensors header, memory-mapped .bin)."""
    if path.suffix == ".safetensors":
        try:
            with safe_open(str(path), framework="pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (not a dict)
        except (SafetensorError, OSError, ValueError) as exc:
            raise _damaged(path, exc) from exc
    return {k: tuple(v.shape) for k, v in _load_bin(path, mmap=True).items()}


def read_hf_weights(path: Path) -> dict[str, Tensor]:
    if path.suffix == ".safetensors":
        try:
            return load_file(path)
        except (SafetensorError, OSError, ValueError) as exc:
            raise _damaged(path, exc) from exc
    return _load_bin(path, mmap=False)


__all__ = ["read_hf_weights", "weight_shapes", "weights_file"]
