"""The output guard's edges: symlinked outputs (dangling: refused before any work; to a folder: the
replacement lands where the link points and leaves nothing hidden behind), a run's own TensorBoard
folder (RUN/tb: replaced with the run by --force, continued by a resumed run), the mode of atomically
written files whatever rewrote them, `import hf --force` over a trained run, and a folder given where a
config file belongs."""

from __future__ import annotations

import json
import os

import pytest
import torch

from attnlab.commands.import_ import check_replaced
from attnlab.runs.checkpoints import save_tensors
from attnlab.runs.outputs import (
    claim_output,
    claim_output_file,
    continue_output,
    start_in_place,
    write_output,
    write_output_file,
)
from attnlab.utils.files import read_json_object


def _heads(path, text="first"):
    with write_output(claim_output(path, "heads", force=path.exists())) as tmp:
        (tmp / "heads.json").write_text(text)


def test_a_dangling_link_is_refused_before_any_work(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"symlink to .*nowhere, which does not exist"):
        claim_output(link, "heads")
    file_link = tmp_path / "avg.safetensors"
    file_link.symlink_to(tmp_path / "nowhere.safetensors")
    with pytest.raises(ValueError, match="which does not exist"):
        claim_output_file(file_link, "averaged")


def test_force_through_a_link_replaces_its_target_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "real", tmp_path / "out"
    _heads(target)
    link.symlink_to(target)
    _heads(link, "second")
    assert link.is_symlink() and (target / "heads.json").read_text() == "second"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_new_output_through_a_link_to_an_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "empty")
    _heads(tmp_path / "out")
    assert (tmp_path / "empty" / "heads.json").read_text() == "first"


def test_a_runs_own_tensorboard_folder(tmp_path):
    run = tmp_path / "run"
    start_in_place(claim_output(run, "run"))
    start_in_place(claim_output(run / "tb", "tensorboard"))
    (run / "tb" / "events.out.tfevents.1").write_text("old")
    # train --force RUN --tensorboard RUN/tb: both claimed, the run first replaced, then its folder made anew
    tb = claim_output(run / "tb", "tensorboard", force=True)
    start_in_place(claim_output(run, "run", force=True))
    start_in_place(tb)
    assert not (run / "tb" / "events.out.tfevents.1").exists() and (run / "tb").is_dir()
    # a resumed run continues it
    (run / "tb" / "events.out.tfevents.2").write_text("first part")
    claim = continue_output(run / "tb", "tensorboard", flag="--tensorboard")
    assert start_in_place(claim) == run / "tb"
    assert (run / "tb" / "events.out.tfevents.2").read_text() == "first part"


def test_rewritten_files_keep_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        with write_output_file(claim_output_file(tmp_path / "avg.safetensors", "averaged")) as tmp:
            save_tensors({"w": torch.zeros(2)}, tmp, metadata={"attnlab_output": "averaged"})
    finally:
        os.umask(old)
    assert (tmp_path / "avg.safetensors").stat().st_mode & 0o777 == 0o644


def _run(path, data, checkpoints=0):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "transformer", "model": {}, "data": data}))
    for i in range(checkpoints):
        (path / "checkpoints" / f"step_{i}").mkdir(parents=True)


def test_import_force_never_replaces_a_trained_run(tmp_path):
    _run(tmp_path / "trained", {"path": "fra-eng.zip"}, checkpoints=2)
    with pytest.raises(ValueError, match="holds a run attnlab trained with 2 checkpoints"):
        check_replaced(str(tmp_path / "trained"))
    _run(tmp_path / "imported", {"source": "hf", "hf_source": "opus"})
    check_replaced(str(tmp_path / "imported"))  # an earlier import: --force may replace it
    check_replaced(str(tmp_path / "new"))


def test_a_folder_for_a_config_file_says_so(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"is a folder; pass .*run/config.json"):
        read_json_object(tmp_path / "run", "config")
