"""Run folders as a hostile user hands them over: an export or a config without a training section, NaN
weights, deeply nested JSON, a model that ends every sentence at once, a temperature float32 cannot
divide by. Each is one line (exit 2) naming what it found, or the right answer."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnlab.cli import main
from attnlab.runs.alignment import alignment_target
from attnlab.runs.loading import load_translator
from attnlab.testing import train_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("hostile") / "run", steps=1)


@pytest.fixture
def run(tiny, tmp_path):
    """A copy of the tiny run to damage."""
    return shutil.copytree(tiny, tmp_path / "run")


def one_line(capsys, argv, code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _edit(path, **change):
    cfg = json.loads(path.read_text())
    for k, v in change.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path.write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "--checkpoint", "{}", "go ."],
        ["evaluate", "--checkpoint", "{}"],
        ["heads", "--checkpoint", "{}", "--out", "{}/../heads"],
        ["attention", "--checkpoint", "{}"],
        ["export", "--checkpoint", "{}", "--format", "hf", "--out", "{}/../hf"],
    ],
    ids=lambda a: a[0],
)
def test_an_export_folder_is_named_as_one(tmp_path, capsys, argv):
    folder = tmp_path / "onnx"
    folder.mkdir()
    (folder / "attnlab-output.json").write_text(json.dumps({"kind": "export-onnx", "entries": []}))
    (folder / "config.json").write_text(json.dumps({"model_type": "transformer", "model": {"num_layers": 2}}))
    err = one_line(capsys, [a.replace("{}", str(folder)) for a in argv])
    assert "is an ONNX export, not a run folder" in err and "the run folder it was made from" in err, err


def test_a_config_without_a_training_section_still_translates(run, capsys):
    (run / "attnlab-output.json").unlink()
    _edit(run / "config.json", train=None)
    assert main(["translate", "--checkpoint", str(run), "--beam", "1", "go ."]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_nan_weights_are_refused_naming_the_tensor(run, capsys):
    weights = load_file(run / "model.safetensors")
    name = sorted(weights)[0]
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, run / "model.safetensors")
    err = one_line(capsys, ["translate", "--checkpoint", str(run), "go ."])
    assert f"tensor {name} holds 1 NaN or infinite values" in err and "model.safetensors" in err, err


@pytest.mark.parametrize("name", ["config.json", "src_vocab.json", "generation.json"])
def test_deeply_nested_json_is_one_line_naming_the_file(run, capsys, name):
    (run / name).write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    err = one_line(capsys, ["translate", "--checkpoint", str(run), "go ."])
    assert f"{name} nests arrays or objects more than 32 deep" in err, err


def test_a_model_that_ends_every_sentence_at_once_is_reported(run, capsys):
    translator = load_translator(run)
    eos = translator.tgt_vocab.eos
    weights = load_file(run / "model.safetensors")
    bias = next(k for k in weights if k.endswith("dense.bias") and weights[k].shape[0] == len(translator.tgt_vocab))
    weights[bias][eos] = 1e4  # <eos> first, always: every translation empty
    save_file(weights, run / "model.safetensors")
    assert main(["evaluate", "--checkpoint", str(run), "--limit", "4", "--beam", "1"]) == 0
    err = capsys.readouterr().err
    assert "warning: every hypothesis is empty" in err, err
    assert main(["translate", "--checkpoint", str(run), "--beam", "1", "go .", "i am calm ."]) == 0
    err = capsys.readouterr().err
    assert "every translation is empty (the model emitted <eos> first for all 2 sentences)" in err, err


@pytest.mark.parametrize("out, words", [("/dev/null", None), ("", "--out needs a file name, got an empty one")])
def test_out_takes_a_device_and_refuses_an_empty_name(tiny, capsys, out, words):
    argv = ["translate", "--checkpoint", str(tiny), "--beam", "1", "--out", out, "go ."]
    if words is None:
        assert main(argv) == 0 and "Traceback" not in capsys.readouterr().err
    else:
        assert words in one_line(capsys, argv)


@pytest.mark.parametrize("t", ["1e-40", "5e-324", "0"])
def test_a_temperature_float32_cannot_divide_by_is_refused(tiny, capsys, t):
    err = one_line(capsys, ["translate", "--checkpoint", str(tiny), "--sample", "--temperature", t, "go ."])
    assert "--temperature must be a finite number >= 0.0001" in err, err


def test_the_smallest_temperature_samples_the_greedy_translation(tiny):
    """At the floor of the range, sampling is argmax: the same tokens as greedy search (another path)."""
    translator = load_translator(tiny)
    texts = ["go .", "i am calm .", "we are friends ."]
    greedy = translator.translate(texts, options=translator.defaults.merged({"beam": 1}))
    cold = translator.defaults.merged({"beam": 1, "sample": True, "temperature": 1e-4, "seed": 3})
    assert translator.translate(texts, options=cold) == greedy
    assert torch.isfinite(torch.tensor(1e-4, dtype=torch.float32))


def test_heads_never_replaces_a_dangling_alignment_link(run, tmp_path):
    (run / "alignment.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ValueError, match=r"was not written by `attnlab heads` and is never replaced"):
        alignment_target(run)
    assert (run / "alignment.json").is_symlink() and not (tmp_path / "elsewhere.json").exists()
