"""The Makefile finds the corpus where CI does (.ci/run), unless ATTNLAB_DATA names another copy, runs one
notebook on request and the suite's longest files first; the README says how its bare `attnlab` commands are
reached."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _make(checkout: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "ATTNLAB_DATA"}
    return subprocess.run(
        ["make", "-s", "--no-print-directory", *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.fixture
def checkout(tmp_path) -> Path:
    (tmp_path / "checkout").mkdir()
    shutil.copy(ROOT / "Makefile", tmp_path / "checkout" / "Makefile")
    return tmp_path / "checkout"


SHOW = ["--eval", 'show-data: ; @echo "[$$ATTNLAB_DATA]"', "show-data"]


def test_make_gives_the_tests_and_the_demo_the_corpus_where_ci_finds_it(checkout):
    assert _make(checkout, *SHOW).stdout.strip() == "[]"  # no copy beside the checkout: nothing is made up
    corpus = checkout.parent / "shared" / "data" / "fra-eng.zip"
    corpus.parent.mkdir(parents=True)
    corpus.write_bytes(b"PK")
    assert _make(checkout, *SHOW).stdout.strip() == f"[{corpus}]"  # absolute: tests that chdir still find it
    mine = str(checkout.parent / "mine.zip")
    assert _make(checkout, *SHOW, env={"ATTNLAB_DATA": mine}).stdout.strip() == f"[{mine}]"  # the user's wins
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "shared/data/fra-eng.zip" in ci  # the same place


def test_make_notebook_refuses_a_name_that_is_no_notebook_in_one_line(checkout):
    (checkout / ".venv").mkdir()
    (checkout / "pyproject.toml").write_text("")
    (checkout / ".venv" / ".installed").write_text("")  # newer than pyproject.toml: nothing to install
    res = _make(checkout, "notebook", "NB=nope")
    assert res.returncode != 0
    assert "make notebook: NB must name one of notebooks/*.ipynb" in res.stderr and "NB='nope'" in res.stderr
    assert not (checkout / "runs").exists()


def test_the_readme_says_how_its_bare_attnlab_commands_are_reached():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"^attnlab ", text, flags=re.M)
    assert first is not None
    before = text[: first.start()]
    assert "source .venv/bin/activate" in before and ".venv/bin/attnlab" in before


def _conftest():
    """tests/conftest.py as a module of its own name (pytest holds it as one of several `conftest`s)."""
    spec = importlib.util.spec_from_file_location("attnlab_suite_conftest", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_test_runs_the_longest_files_first(checkout, tmp_path):
    """Two processes take whole files; a long file begun last would run on while the other idles. So the suite
    orders its files (recorded slowest first, then those with a `slow` test) and `make test` keeps that order
    (xdist's default would reorder the files by their number of tests)."""
    (checkout / ".venv").mkdir()
    (checkout / "pyproject.toml").write_text("")
    (checkout / ".venv" / ".installed").write_text("")
    dry = _make(checkout, "-n", "test").stdout
    assert "-m pytest -q -n 2 --dist loadfile --no-loadscope-reorder" in dry, dry
    conftest = _conftest()
    files = {"tests/a.py": False, "tests/b.py": True, "tests/c.py": False, "tests/d.py": False}
    seconds = Counter({"tests/c.py": 30.0, "tests/d.py": 90.0})
    assert conftest.longest_first(files, seconds) == ["tests/d.py", "tests/c.py", "tests/b.py", "tests/a.py"]
    recorded = conftest.recorded_seconds()  # benchmarks/results/suite.json, as `make test-timing` wrote it
    assert recorded and all(f.startswith("tests/") and f.endswith(".py") for f in recorded), recorded
    assert conftest.recorded_seconds(tmp_path / "none.json") == Counter()
    # The hook itself, on a copy of the conftest (no timing record there: the `slow` marker decides).
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"), encoding="utf-8")
    (probe / "test_a.py").write_text("def test_one(): pass\ndef test_two(): pass\n", encoding="utf-8")
    slow = """
        import pytest

        def test_quick(): pass

        @pytest.mark.slow
        def test_long(): pass
    """
    (probe / "test_b.py").write_text(textwrap.dedent(slow), encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(probe)],
        cwd=probe,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CI": ""},
        timeout=120,
        check=False,
    )
    ids = [line for line in res.stdout.splitlines() if "::" in line]
    assert ids == ["test_b.py::test_quick", "test_b.py::test_long", "test_a.py::test_one", "test_a.py::test_two"], res
