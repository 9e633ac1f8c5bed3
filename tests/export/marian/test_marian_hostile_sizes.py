"""`attnlab import hf` compares the config with the weights' header and this machine's memory before
building anything, and refuses weights holding a NaN: each is one line naming the file, at once."""

from __future__ import annotations

import time

import pytest
from safetensors.torch import load_file, save_file

from .test_marian_inputs import _copy, _edit_config, _one_line_error

pytest.importorskip("transformers")


def test_a_hundred_thousand_layers_beside_two_are_refused_at_once(marian_dir, tmp_path, capsys):
    src = _copy(marian_dir, tmp_path)
    _edit_config(src, encoder_layers=100_000)
    t0 = time.perf_counter()
    err = _one_line_error(capsys, ["import", "hf", str(src), "--out", str(tmp_path / "out")])
    assert time.perf_counter() - t0 < 5, "the header is read before any model is built"
    assert "encoder_layers=100000" in err and "holds 2 encoder layers" in err
    assert not (tmp_path / "out").exists()


def test_a_billion_positions_are_refused_by_the_size_check(marian_dir, tmp_path, capsys):
    src = _copy(marian_dir, tmp_path)
    _edit_config(src, max_position_embeddings=1_000_000_000)
    err = _one_line_error(capsys, ["import", "hf", str(src), "--out", str(tmp_path / "out")])
    assert "config.json describes a transformer of at least" in err and "lower model.max_len" in err, err


def test_nan_weights_are_refused_naming_the_tensor(marian_dir, tmp_path, capsys):
    src = _copy(marian_dir, tmp_path)
    weights = load_file(src / "model.safetensors")
    name = sorted(k for k in weights if "fc1.weight" in k)[0]
    weights[name][0, 0] = float("nan")
    save_file(weights, src / "model.safetensors", metadata={"format": "pt"})
    err = _one_line_error(capsys, ["import", "hf", str(src), "--out", str(tmp_path / "out")])
    assert f"tensor {name} holds 1 NaN or infinite values" in err and "model.safetensors" in err, err
    assert not (tmp_path / "out").exists()


def test_a_deeply_nested_config_is_one_line_naming_it(marian_dir, tmp_path, capsys):
    src = _copy(marian_dir, tmp_path)
    (src / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    err = _one_line_error(capsys, ["import", "hf", str(src), "--out", str(tmp_path / "out")])
    assert "config.json nests arrays or objects more than 32 deep" in err, err
