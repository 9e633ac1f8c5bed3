"""Image data: the digits' fixed split, folders of images, and one-line refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnlab.data.images import load_digits_data, load_image_data, load_image_folder, split_of

pytest.importorskip("sklearn")
SRC = Path(__file__).resolve().parents[2] / "src"


def test_digits_split_is_fixed_and_disjoint():
    a, b = load_digits_data(), load_digits_data()
    sizes = (len(a.train), len(a.valid), len(a.test))
    assert sum(sizes) == 1797 and sizes == (len(b.train), len(b.valid), len(b.test))
    assert 1150 < sizes[0] < 1350 and 200 < sizes[2] < 340
    np.testing.assert_array_equal(a.test.images, b.test.images)
    assert a.image_shape == (1, 8, 8) and a.classes == [str(i) for i in range(10)]
    assert a.train.images.min() >= 0.0 and a.train.images.max() <= 1.0


# The splits of the first digits as shipped: a change of the hash (or of its cut-offs) moves images between splits.
KNOWN = (
    "train train train test train test test train train train train train train train train train train train "
    "train test train train test train train train train valid train valid train train train train train train valid"
)


def test_split_of_gives_the_known_splits():
    assert [split_of(f"digits-{i}") for i in range(37)] == KNOWN.split()
    counts = {s: sum(split_of(f"digits-{i}") == s for i in range(1797)) for s in ("train", "valid", "test")}
    assert counts == {"train": 1259, "valid": 260, "test": 278}


def test_split_of_is_the_same_in_every_interpreter():
    """Python's own hash() of a str changes with PYTHONHASHSEED (a new seed per process by default)."""
    code = "from attnlab.data.images import split_of; print(' '.join(split_of(f'digits-{i}') for i in range(300)))"
    procs = [  # started together: the two imports overlap
        subprocess.Popen(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(SRC)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    outs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert outs[0] == outs[1] == " ".join(split_of(f"digits-{i}") for i in range(300)) + "\n"


def _write(folder, name, size, value=128, mode="L"):
    folder.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(folder / name)


def test_a_folder_of_images_one_subfolder_per_class(tmp_path):
    for cls, value in (("dark", 20), ("light", 230)):
        for i in range(12):
            _write(tmp_path / cls, f"{i}.png", (6, 4), value)
    data = load_image_data({"loader": "folder", "path": str(tmp_path)})
    assert data.classes == ["dark", "light"] and data.image_shape == (1, 4, 6)
    assert len(data.train) + len(data.valid) + len(data.test) == 24
    light = data.train.images[data.train.labels == 1]
    assert np.allclose(light, 230 / 255)


def test_images_of_different_sizes_are_one_line(tmp_path):
    _write(tmp_path / "a", "1.png", (8, 8))
    _write(tmp_path / "b", "2.png", (8, 6))
    with pytest.raises(ValueError, match=r"images of different sizes: .*2\.png is 8x6 but .*1\.png is 8x8"):
        load_image_folder(tmp_path)


def test_folders_without_classes_or_images_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_image_folder(tmp_path / "nowhere")
    _write(tmp_path / "only", "1.png", (4, 4))
    with pytest.raises(ValueError, match="one subfolder per class"):
        load_image_folder(tmp_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="is not a readable image"):
        load_image_folder(tmp_path)
    with pytest.raises(ValueError, match="unknown image data loader"):
        load_image_data({"loader": "mnist"})
