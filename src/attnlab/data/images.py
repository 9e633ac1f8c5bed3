"""Images for the Vision Transformer: scikit-learn's 8x8 digits, or any folder of same-size images.

    load_image_data({"loader": "digits"})                  # 1,797 digits, 8x8, 10 classes (no download)
    load_image_data({"loader": "folder", "path": "shapes/"})  # shapes/<class>/<image>.png ...

Every split is fixed: an image goes to train (70%), valid (15%) or test (15%) by a hash of its index
(digits) or of its path inside the folder, so the split never depends on a seed, a machine or the order
files are listed in. Pixels are float32 in [0, 1], laid out (N, C, H, W).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.utils.extras import require

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
SPLITS = ("train", "valid", "test")
LOADERS = ("digits", "folder")


@dataclass
class ImageSplit:
    """One split: images (N, C, H, W) float32 in [0, 1] and labels (N,) int64."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class ImageData:
    """The three fixed splits, the class names (label i is classes[i]) and the settings they came from."""

    train: ImageSplit
    valid: ImageSplit
    test: ImageSplit
    classes: list[str]
    settings: dict = field(default_factory=dict)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of every image."""
        c, h, w = self.train.images.shape[1:]
        return int(c), int(h), int(w)

    def split(self, name: str) -> ImageSplit:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; expected one of {SPLITS}")
        return getattr(self, name)


def split_of(key: str) -> str:
    """The fixed split of one image, from a stable hash of its key: 70% train, 15% valid, 15% test."""
    bucket = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "train" if bucket < 70 else "valid" if bucket < 85 else "test"


def _splits(images: np.ndarray, labels: np.ndarray, keys: list[str]) -> dict[str, ImageSplit]:
    names = np.array([split_of(k) for k in keys])
    return {s: ImageSplit(np.ascontiguousarray(images[names == s]), labels[names == s]) for s in SPLITS}


def check_image_data_config(data_config: Mapping[str, Any]) -> None:
    """Raise ValueError for image data settings `load_image_data` would refuse, before reading a file."""
    if not isinstance(data_config, Mapping):
        raise ValueError(f"image data settings must be a dict, got {type(data_config).__name__}")
    loader = data_config.get("loader", "digits")
    if loader not in LOADERS:
        raise ValueError(f"unknown image data loader {loader!r}; expected one of {LOADERS}")
    allowed = {"loader"} | ({"path"} if loader == "folder" else set())
    unknown = sorted(set(data_config) - allowed)
    if unknown:
        raise ValueError(f"the {loader!r} image loader does not take {unknown}; it takes {sorted(allowed)}")
    if loader == "folder" and not data_config.get("path"):
        raise ValueError("the 'folder' image loader needs a path: --data DIR with one subfolder per class")


def load_image_data(data_config: Mapping[str, Any]) -> ImageData:
    """The data a ViT run trains on: {"loader": "digits"} or {"loader": "folder", "path": DIR}."""
    check_image_data_config(data_config)
    if data_config.get("loader", "digits") == "digits":
        return load_digits_data()
    return load_image_folder(data_config["path"])


def load_digits_data() -> ImageData:
    """scikit-learn's 8x8 handwritten digits (1,797 images, values 0..16 scaled to [0, 1]), split by index."""
    require("vision", "the digits data set")
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[:, None]  # (N, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    parts = _splits(images, labels, [f"digits-{i}" for i in range(len(labels))])
    classes = [str(c) for c in digits.target_names]
    return ImageData(**parts, classes=classes, settings={"loader": "digits"})


def _read_image(path: Path, mode: str | None) -> tuple[np.ndarray, str]:
    """(C, H, W) float32 in [0, 1] and the mode it was read in ('L' or 'RGB'; the first image decides)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            mode = mode or ("L" if im.mode in ("1", "L", "I", "I;16", "F") else "RGB")
            arr = np.asarray(im.convert(mode), dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{path} is not a readable image ({exc}); remove it or replace it") from None
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    return np.ascontiguousarray(arr), mode


def load_image_folder(path: str | Path) -> ImageData:
    """Images of one size from DIR/<class>/<file> (PNG, JPEG, BMP, GIF; read with Pillow, which matplotlib
    brings): one class per subfolder, in sorted order. Greyscale when the first image is, else RGB.

    Raises FileNotFoundError for a missing folder, ValueError for no classes, no images, an unreadable
    file or images of different sizes (naming the file and both sizes).
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {root} does not exist; pass --data DIR with one subfolder per class")
    class_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(class_dirs) < 2:
        raise ValueError(
            f"{root} holds {len(class_dirs)} class folder(s); an image folder needs one subfolder per class "
            f"(at least two), e.g. {root}/cat/1.png and {root}/dog/1.png"
        )
    images, labels, keys = [], [], []
    mode, first, size = None, None, None
    for label, folder in enumerate(class_dirs):
        for file in sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES):
            arr, mode = _read_image(file, mode)
            if size is None:
                first, size = file, arr.shape[1:]
            elif arr.shape[1:] != size:
                raise ValueError(
                    f"images of different sizes: {file} is {arr.shape[2]}x{arr.shape[1]} but {first} is "
                    f"{size[1]}x{size[0]}; resize them to one size first"
                )
            images.append(arr)
            labels.append(label)
            keys.append(str(file.relative_to(root)))
    if not images:
        raise ValueError(f"{root} holds no images ({', '.join(IMAGE_SUFFIXES)}) in its class folders")
    parts = _splits(np.stack(images), np.array(labels, dtype=np.int64), keys)
    if not len(parts["train"]):
        raise ValueError(f"{root} has too few images for a training split ({len(images)}); add more")
    settings = {"loader": "folder", "path": str(root)}
    return ImageData(**parts, classes=[p.name for p in class_dirs], settings=settings)


__all__ = [
    "IMAGE_SUFFIXES",
    "ImageData",
    "ImageSplit",
    "check_image_data_config",
    "load_digits_data",
    "load_image_data",
    "load_image_folder",
    "split_of",
]
