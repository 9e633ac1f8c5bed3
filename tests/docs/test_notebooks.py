"""The chapter's notebooks: one per section of D2L chapter 11 with its number, and after 11.7 (the Transformer)
attention since the book, in sync with their sources and committed without outputs, each with exercises whose
solutions run, and a raising cell is reported with its notebook. That every notebook runs top to bottom under
ATTNLAB_SMALL=1 and explains each figure it draws is checked on the notebooks the docs site's build executed
(tests/docs/test_site.py: one execution serves both)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOURCES = sorted((ROOT / "notebooks" / "src").glob("*.py"))
SECTIONS = [
    "attention_cues",
    "nadaraya_watson",
    "scoring_functions",
    "bahdanau",
    "multihead_attention",
    "self_attention_positional_encoding",
    "transformer",
    "attention_since_the_book",
    "vision_transformer",
    "decoder_only",
]
# Each notebook's first heading: its book section, or where it comes in the chapter.
HEADINGS = [*(f"# 11.{n} " for n in range(1, 8)), "# After 11.7: ", "# 11.8 ", "# 11.9 "]


def _build():
    spec = importlib.util.spec_from_file_location("attnlab_notebooks_build", ROOT / "notebooks" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_notebook_per_section_of_the_chapter():
    assert [p.stem.split("_", 1)[1] for p in NOTEBOOKS] == SECTIONS
    assert [p.stem for p in SOURCES] == [p.stem for p in NOTEBOOKS]


def test_each_notebook_has_its_section_number_and_exercises_with_solutions():
    import nbformat

    for heading, path in zip(HEADINGS, NOTEBOOKS, strict=True):
        cells = nbformat.read(path, as_version=4).cells
        assert cells[0].cell_type == "markdown" and cells[0].source.startswith(heading), path.name
        exercises = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Exercise")]
        assert 2 <= len(exercises) <= 3, (path.name, len(exercises))
        for i in exercises:  # the next code cell solves it, tagged so Jupyter and the docs fold it away
            solution = next(c for c in cells[i + 1 :] if c.cell_type == "code")
            assert "solution" in solution.metadata.get("tags", []), (path.name, cells[i].source[:40])
            assert solution.metadata.get("jupyter", {}).get("source_hidden") is True
            assert re.search(r"\bassert\b|assert_close", solution.source), "a solution checks its answer"
        prose = sum(len(c.source.split()) for c in cells if c.cell_type == "markdown")
        assert prose >= 250, f"{path.name}: {prose} words of prose"


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


def test_a_failing_notebook_is_caught(tmp_path):
    """The executor really reports a raising cell, and which notebook it was in (so a failing notebook fails
    the docs build, which names it)."""
    import nbformat
    from nbclient.exceptions import CellExecutionError

    ok, bad = nbformat.v4.new_notebook(), nbformat.v4.new_notebook()
    ok.cells = [nbformat.v4.new_code_cell("x = 1")]
    bad.cells = [nbformat.v4.new_code_cell("undefined_name")]
    with pytest.raises(CellExecutionError, match="NameError") as exc:
        _build().execute([ok, bad], tmp_path, timeout=60)
    assert exc.value.notebook == 1  # type: ignore[attr-defined]
