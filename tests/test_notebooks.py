"""The chapter's notebooks: in sync with their sources, committed without outputs, and each one runs
top to bottom under ATTNLAB_SMALL=1 (the CI switch: seconds per notebook) without an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SECTIONS = ["attention_cues", "nadaraya_watson", "scoring_functions", "bahdanau", "multihead_attention",
            "self_attention_positional_encoding", "transformer"]


def test_one_notebook_per_section_of_the_chapter():
    assert [p.stem.split("_", 1)[1] for p in NOTEBOOKS] == SECTIONS


def test_notebooks_match_their_sources_and_hold_no_outputs():
    res = subprocess.run([sys.executable, str(ROOT / "notebooks" / "build.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            assert not cell.get("outputs") and not cell.get("execution_count"), f"{path.name} has outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("ATTNLAB_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # The kernel is a child process: it must import this checkout's attnlab.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    nb = nbformat.read(path, as_version=4)
    # Bounded: a cell that hangs fails the test instead of the CI job.
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
