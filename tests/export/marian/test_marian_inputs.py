"""`attnlab import hf` on damaged or hostile folders: one line naming the file, nothing written, no big
allocation before the config is checked against the weights."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from attnlab.cli import main

pytest.importorskip("transformers")


def _copy(marian_dir, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(marian_dir, src)
    return src


def _edit_config(src, **change):
    cfg = json.loads((src / "config.json").read_text())
    for key, value in change.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (src / "config.json").write_text(json.dumps(cfg))


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_huge_config_is_refused_before_any_allocation(marian_dir, tmp_path):
    """d_model 4096, FFN 2^20, 24 layers (23 GB of parameters) beside tiny weights: under a 3 GB address
    space limit the import fails in one line naming the first tensor whose shape disagrees."""
    src = _copy(marian_dir, tmp_path)
    big = dict(d_model=4096, encoder_ffn_dim=2**20, decoder_ffn_dim=2**20, encoder_layers=24, decoder_layers=24)
    _edit_config(src, **big)
    code = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        from attnlab.cli import main
        sys.exit(main(["import", "hf", {str(src)!r}, "--out", {str(tmp_path / "out")!r}]))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "model.safetensors" in err and "encoder_layers=24" in err, err
    assert not (tmp_path / "out").exists()


def _truncate(src):
    data = (src / "model.safetensors").read_bytes()
    (src / "model.safetensors").write_bytes(data[: len(data) - 100])


def _cut_header(src):
    (src / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes()[:3000])


def _pickle_bin(src):
    import os
    import pickle

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {src / 'ran'}",))

    (src / "model.safetensors").unlink()
    with open(src / "pytorch_model.bin", "wb") as f:
        pickle.dump({"model.shared.weight": Payload()}, f)


@pytest.mark.parametrize(
    "damage, file, words",
    [
        (_truncate, "model.safetensors", "download the model again"),
        (_cut_header, "model.safetensors", "download the model again"),
        (_pickle_bin, "pytorch_model.bin", "never unpickles"),
        (lambda s: (s / "config.json").write_text("[1, 2]"), "config.json", "JSON array"),
        (lambda s: (s / "config.json").write_text("null"), "config.json", "holds null"),
        (lambda s: _edit_config(s, d_model=None), "config.json", "lacks d_model"),
        (lambda s: _edit_config(s, eos_token_id=10**6), "config.json", "eos_token_id=1000000"),
        (lambda s: (s / "generation_config.json").write_text('{"a": '), "generation_config.json", "not valid JSON"),
        (lambda s: (s / "tokenizer_config.json").write_text("[]"), "tokenizer_config.json", "JSON array"),
        (lambda s: (s / "source.spm").write_bytes(b"not a model"), "source.spm", "not a SentencePiece model"),
        (lambda s: (s / "vocab.json").write_text('{"a": "x"}'), "vocab.json", "integer id"),
        (lambda s: (s / "vocab.json").write_text("[1]"), "vocab.json", "JSON array"),
    ],
)
def test_damaged_folder_is_one_line_naming_the_file(marian_dir, tmp_path, capsys, damage, file, words):
    src = _copy(marian_dir, tmp_path)
    damage(src)
    err = _one_line_error(capsys, ["import", "hf", str(src), "--out", str(tmp_path / "out")])
    assert str(src / file) in err or file in err, err
    assert words in err, err
    assert not (tmp_path / "out").exists() and not (src / "ran").exists()


def test_pytorch_model_bin_of_tensors_still_imports(marian_dir, tmp_path):
    from safetensors.torch import load_file

    from attnlab.export.marian import import_hf
    from attnlab.runs.loading import load_translator

    src = _copy(marian_dir, tmp_path)
    torch.save(load_file(src / "model.safetensors"), src / "pytorch_model.bin")
    (src / "model.safetensors").unlink()
    ref = load_translator(import_hf(marian_dir, tmp_path / "ref")).translate(["The cat sleeps."])
    assert load_translator(import_hf(src, tmp_path / "run")).translate(["The cat sleeps."]) == ref
