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
SECTIONS = [
    "attention_cues",
    "nadaraya_watson",
    "scoring_functions",
    "bahdanau",
    "multihead_attention",
    "self_attention_positional_encoding",
    "transformer",
    "vision_transformer",
    "decoder_only",
]


def test_one_notebook_per_section_of_the_chapter():
    assert [p.stem.split("_", 1)[1] for p in NOTEBOOKS] == SECTIONS


def test_notebooks_match_their_sources_and_hold_no_outputs():
    res = subprocess.run(
        [sys.executable, str(ROOT / "notebooks" / "build.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            assert not cell.get("outputs") and not cell.get("execution_count"), f"{path.name} has outputs"


def test_every_notebook_runs(tmp_path, monkeypatch):
    """All notebooks in ONE kernel (starting a kernel and importing torch costs more than a small notebook),
    with `%reset -f` between them so no notebook can lean on another's variables."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("ATTNLAB_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # The kernel is a child process: it must import this checkout's attnlab.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    combined = nbformat.v4.new_notebook()
    owner = []  # notebook name of each combined cell
    for path in NOTEBOOKS:
        combined.cells.append(nbformat.v4.new_code_cell("%reset -f"))
        owner.append(path.name)
        for cell in nbformat.read(path, as_version=4).cells:
            combined.cells.append(cell)
            owner.append(path.name)
    # Bounded: a cell that hangs fails the test instead of the CI job; an error stops at its cell.
    client = NotebookClient(
        combined, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute()
    except CellExecutionError as exc:  # say which notebook failed
        failed = next(
            (
                owner[i]
                for i, c in enumerate(combined.cells)
                if any(o.get("output_type") == "error" for o in c.get("outputs", []))
            ),
            "?",
        )
        pytest.fail(f"{failed} failed under ATTNLAB_SMALL=1:\n{exc}")
    ran = sum(1 for c in combined.cells if c.cell_type == "code" and c.get("execution_count"))
    assert ran == sum(1 for c in combined.cells if c.cell_type == "code")


def test_a_failing_notebook_is_caught(tmp_path):
    """The executor really reports a raising cell (so the test above can fail)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%reset -f"), nbformat.v4.new_code_cell("undefined_name")]
    with pytest.raises(CellExecutionError, match="NameError"):
        NotebookClient(nb, timeout=60, kernel_name="python3").execute()
