"""Run folders: round trip through load_translator, averaging, pruning, and errors a user can act on."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from train_helpers import needs_data, tiny_run

from attnlab.runs.checkpoints import (
    average_checkpoints,
    list_checkpoints,
    load_trainer_state,
    prune_checkpoints,
    save_checkpoint,
    save_tensors,
)
from attnlab.runs.loading import load_translator
from attnlab.runs.weights import read_weights

pytestmark = [needs_data, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("ckpt") / "run"
    tiny_run(out, max_steps=4, checkpoint_every=2)
    return out


def _copy(run_dir, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(run_dir, dst)
    return dst


def test_run_folder_layout(run_dir):
    for name in ("config.json", "src_vocab.json", "tgt_vocab.json", "model.safetensors", "log.jsonl"):
        assert (run_dir / name).is_file(), name
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["model_type"] == "transformer"
    assert set(cfg) >= {"model", "train", "data"}
    assert cfg["train"]["max_steps"] == 4 and cfg["data"]["num_examples"] == 300
    steps = [p.name for p in list_checkpoints(run_dir)]
    assert steps == ["step_0000002", "step_0000004"]
    for p in list_checkpoints(run_dir):
        assert {f.name for f in p.iterdir()} == {"model.safetensors", "trainer_state.pt", "meta.json", "manifest.json"}
    state = load_trainer_state(list_checkpoints(run_dir)[-1])  # weights_only=True load
    assert state["step"] == 4 and "optimizer" in state and "rng" in state
    assert not any(p.name.startswith(".") for p in (run_dir / "checkpoints").iterdir())


def test_load_translator_round_trip(run_dir):
    t = load_translator(run_dir)
    final = read_weights(run_dir / "model.safetensors")
    last = read_weights(list_checkpoints(run_dir)[-1] / "model.safetensors")
    state = t.model.state_dict()
    for k, v in final.items():
        assert torch.equal(state[k], v) and torch.equal(last[k], v), k
    assert len(t.src_vocab) == t.config["model"]["src_vocab_size"]
    assert t.max_len == 16  # the tiny preset's position limit (sinusoidal: not the training length)
    out = t.translate(["go .", "i'm home ."])
    assert len(out) == 2 and all(isinstance(s, str) for s in out)
    assert t.translate(["go ."], options=t.options(beam=2))[0] == t.translate(["go ."], options=t.options(beam=2))[0]
    (tr,) = t.translate_tokens(["go zzzqqq ."])  # unknown word -> <unk>, never a crash
    assert tr.src_tokens == ["go", "<unk>", ".", "<eos>"]
    assert tr.text == t.translate(["go zzzqqq ."])[0]


def test_translator_input_errors(run_dir):
    t = load_translator(run_dir)
    for bad in ["", "   "]:
        with pytest.raises(ValueError, match="empty"):
            t.translate([bad])
    with pytest.raises(ValueError, match="list of sentences"):
        t.translate("go .")
    long = "i am a very long sentence that goes on and on and on and on and on and on ."  # 20 tokens
    with pytest.raises(ValueError, match="max_len"):
        t.translate([long])
    with pytest.warns(UserWarning, match="truncating"):
        (res,) = t.translate_tokens([long], truncate=True)
    assert len(res.src_tokens) == t.max_len


def test_missing_files_are_named(run_dir, tmp_path):
    for name in ("tgt_vocab.json", "config.json", "model.safetensors"):
        d = _copy(run_dir, tmp_path / name)
        (d / name).unlink()
        with pytest.raises(FileNotFoundError, match=name.replace(".", r"\.")):
            load_translator(d)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_translator(tmp_path / "nowhere")


def test_mismatched_vocab_names_both_files(run_dir, tmp_path):
    from attnlab.data import Vocab

    d = _copy(run_dir, tmp_path)
    Vocab(["a", "b", "c"], min_freq=1).save(d / "tgt_vocab.json")
    with pytest.raises(ValueError, match=r"tgt_vocab_size=\d+.*tgt_vocab\.json holds 7 tokens"):
        load_translator(d)
    # Config edited to agree with the new vocabulary: now the weights disagree, and say so.
    cfg = json.loads((d / "config.json").read_text())
    cfg["model"]["tgt_vocab_size"] = 7
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"shape .* expects .*7"):
        load_translator(d)


def test_average_of_identical_checkpoints_is_the_checkpoint(run_dir, tmp_path):
    one = list_checkpoints(run_dir)[-1]
    avg = average_checkpoints([one, one, one])
    ref = read_weights(one / "model.safetensors")
    assert avg.keys() == ref.keys()
    for k in ref:
        assert torch.equal(avg[k], ref[k]), k
    # And averaging two different checkpoints is their mean.
    first = read_weights(list_checkpoints(run_dir)[0] / "model.safetensors")
    mean = average_checkpoints(list_checkpoints(run_dir))
    k = next(iter(ref))
    torch.testing.assert_close(mean[k], (first[k] + ref[k]) / 2)
    out = tmp_path / "avg.safetensors"
    save_tensors(avg, out)
    t = load_translator(run_dir, weights=out)
    assert t.translate(["go ."]) == load_translator(run_dir).translate(["go ."])


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "no manifest, truncated"])
def test_average_refuses_a_damaged_checkpoint_naming_it(run_dir, tmp_path, capsys, damage):
    from attnlab.cli import main

    run = _copy(run_dir, tmp_path)
    bad = list_checkpoints(run)[0]
    data = bytearray((bad / "model.safetensors").read_bytes())
    if damage == "flip a byte":
        data[-1] ^= 0xFF
    else:
        data = data[: len(data) // 2]
    if damage.startswith("no manifest"):
        (bad / "manifest.json").unlink()
    (bad / "model.safetensors").write_bytes(bytes(data))
    assert main(["average", "--checkpoint", str(run), "--last", "2", "--out", str(tmp_path / "avg.safetensors")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and bad.name in err and "damaged" in err, err
    assert not (tmp_path / "avg.safetensors").exists()
    assert average_checkpoints(list_checkpoints(run)[1:])  # the intact ones still average


def test_prune_keeps_last_and_best(tmp_path):
    model = torch.nn.Linear(2, 2)
    for step, bleu in [(1, 5.0), (2, 9.0), (3, None), (4, 7.0), (5, 1.0), (6, None)]:
        save_checkpoint(tmp_path, step, model, {"step": step}, {"step": step, "valid_bleu": bleu})
    removed = prune_checkpoints(tmp_path, keep_last=2, keep_best=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step_0000002",
        "step_0000004",
        "step_0000005",
        "step_0000006",
    ]
    assert len(removed) == 2


def test_checkpoint_overwrite_is_atomic_swap(tmp_path):
    model = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path, 3, model, {"v": 1}, {"step": 3})
    with torch.no_grad():
        model.weight.fill_(2.0)
    save_checkpoint(tmp_path, 3, model, {"v": 2}, {"step": 3})
    (p,) = list_checkpoints(tmp_path)
    assert load_trainer_state(p) == {"v": 2}
    assert torch.all(read_weights(p / "model.safetensors")["weight"] == 2.0)
    assert [q.name for q in (tmp_path / "checkpoints").iterdir()] == ["step_0000003"]
