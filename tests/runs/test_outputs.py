"""The one output guard (`attnlab.runs.outputs`): new, an earlier output of the same kind (with --force),
or refused; checked before any work and again at the final rename."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from attnlab.runs.layout import MARKER_FILE
from attnlab.runs.outputs import (
    OUTPUT_METADATA,
    claim_output,
    claim_output_file,
    output_kind,
    read_marker,
    start_in_place,
    write_output,
    write_output_file,
)
from attnlab.utils.files import make_temp_dir


def _made(tmp_path, kind="heads", name="out", files=("a.txt",)):
    claim = claim_output(tmp_path / name, kind)
    with write_output(claim) as tmp:
        for f in files:
            (tmp / f).write_text(f"first {f}")
    return claim.path


def test_new_and_empty_folders_are_claimed_and_marked(tmp_path):
    (tmp_path / "empty").mkdir()
    for name in ("new", "empty"):
        out = _made(tmp_path, name=name)
        assert output_kind(out) == "heads"
        assert read_marker(out)["entries"] == ["a.txt"]
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_a_users_folder_or_file_is_refused_whatever_the_flags(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"model_type": "bert"}')  # a user's model folder
    for force in (False, True):
        with pytest.raises(ValueError, match="holds no attnlab output"):
            claim_output(mine, "export-hf", force=force)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        claim_output(tmp_path / "f", "heads", force=True)
    with pytest.raises(ValueError, match="which is a file"):
        claim_output(tmp_path / "f" / "sub", "heads")


def test_same_kind_needs_force_other_kinds_never(tmp_path):
    out = _made(tmp_path)
    with pytest.raises(ValueError, match="already holds a head analysis; pass --force"):
        claim_output(out, "heads")
    with pytest.raises(ValueError, match="holds a head analysis, not a Hugging Face export"):
        claim_output(out, "export-hf", force=True)
    claim = claim_output(out, "heads", force=True)
    with write_output(claim) as tmp:
        (tmp / "b.txt").write_text("second")
    assert sorted(p.name for p in out.iterdir()) == [MARKER_FILE, "b.txt"]


def test_force_never_deletes_what_attnlab_did_not_write(tmp_path):
    out = _made(tmp_path)
    (out / "notes.md").write_text("mine")
    with pytest.raises(ValueError, match=r"notes\.md, which attnlab did not write there"):
        claim_output(out, "heads", force=True)
    assert (out / "notes.md").read_text() == "mine"


def test_force_never_replaces_the_commands_own_input(tmp_path):
    out = _made(tmp_path, kind="demo")
    claim_output(out, "demo", force=True)  # allowed: nothing read lies inside
    with pytest.raises(ValueError, match="which this command reads"):
        claim_output(out, "demo", force=True, sources=[out / "a.txt"])


def test_two_writers_of_one_new_folder_cannot_both_succeed(tmp_path):
    target = tmp_path / "prepared"
    first, second = claim_output(target, "prepared"), claim_output(target, "prepared")  # both saw it new
    with write_output(first) as tmp:
        (tmp / "shard").write_text("first")
    rival = pytest.raises(ValueError, match="written by another process while this one ran")
    with rival, write_output(second) as tmp:
        (tmp / "shard").write_text("second")
    assert (target / "shard").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared"]  # the loser's temp folder is gone


def test_a_replacement_checks_the_earlier_output_again_at_the_rename(tmp_path):
    out = _made(tmp_path)
    mine = claim_output(out, "heads", force=True)
    rival = claim_output(out, "heads", force=True)
    with write_output(rival) as tmp:  # another process replaced it first
        (tmp / "a.txt").write_text("rival")
    with pytest.raises(ValueError, match="another process"), write_output(mine) as tmp:
        (tmp / "a.txt").write_text("mine")
    assert (out / "a.txt").read_text() == "rival"


def test_a_failure_leaves_the_earlier_output_whole(tmp_path):
    out = _made(tmp_path)
    claim = claim_output(out, "heads", force=True)
    with pytest.raises(RuntimeError), write_output(claim) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("killed")
    assert (out / "a.txt").read_text() == "first a.txt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_outputs_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        out = _made(tmp_path)
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755


def test_runs_are_made_in_place_whole_and_replaced_only_with_force(tmp_path):
    run = start_in_place(claim_output(tmp_path / "run", "run"))
    assert output_kind(run) == "run"
    (run / "config.json").write_text("{}")
    (run / "checkpoints").mkdir()
    with pytest.raises(ValueError, match="already holds an attnlab run; continue it with --resume"):
        claim_output(run, "run", hint=f"; continue it with --resume {run}")
    (run / "attention").mkdir()  # another output inside blocks a replacement
    with pytest.raises(ValueError, match="attention"):
        claim_output(run, "run", force=True)
    (run / "attention").rmdir()
    start_in_place(claim_output(run, "run", force=True))
    assert sorted(p.name for p in run.iterdir()) == [MARKER_FILE]


def test_an_older_run_folder_without_a_marker_is_still_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model_type": "transformer", "model": {}}))
    assert output_kind(run) == "run"


def test_single_files_new_same_kind_or_refused(tmp_path):
    weights = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2)}, str(weights), metadata={"attnlab_model_config": "{}"})  # a run's weights
    for force in (False, True):
        with pytest.raises(ValueError, match="holds a run's weights; attnlab never replaces it"):
            claim_output_file(weights, "averaged", force=force)
    with pytest.raises(ValueError, match=r"must end in \.safetensors"):
        claim_output_file(tmp_path / "avg.bin", "averaged")
    avg = tmp_path / "avg.safetensors"
    with write_output_file(claim_output_file(avg, "averaged")) as tmp:
        save_file({"w": torch.ones(2)}, str(tmp), metadata={OUTPUT_METADATA: "averaged"})
    assert output_kind(avg) == "averaged"
    with pytest.raises(ValueError, match="pass --force"):
        claim_output_file(avg, "averaged")
    claim_output_file(avg, "averaged", force=True)


def test_a_new_file_never_replaces_one_that_appeared_meanwhile(tmp_path):
    avg = tmp_path / "avg.safetensors"
    claim = claim_output_file(avg, "averaged")
    avg.write_text("the user's")
    with pytest.raises(ValueError, match="another process"), write_output_file(claim) as tmp:
        tmp.write_text("ours")
    assert avg.read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg.safetensors"]


def test_temp_folders_of_killed_writers_are_removed_live_ones_kept(tmp_path):
    # A writer that died mid-way (its pid is gone) left a temp folder beside the target.
    code = f"from attnlab.utils.files import make_temp_dir; make_temp_dir({str(tmp_path / 'out')!r})"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    (left,) = tmp_path.iterdir()
    live = make_temp_dir(tmp_path / "out")  # this process's, still writing
    _made(tmp_path)
    assert not left.exists() and live.is_dir()
