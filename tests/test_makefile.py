"""The Makefile finds the corpus where CI does (.ci/run), unless ATTNLAB_DATA names another copy, and runs one
notebook on request; the README says how its bare `attnlab` commands are reached."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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


def test_make_test_quick_names_test_folders_that_exist_and_make_test_stays_the_readmes_second_command():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    quick = re.search(r"^QUICK\s*:=\s*((?:.*\\\n)*.*)$", makefile, flags=re.M)
    assert quick is not None and "test-quick:" in makefile
    paths = quick.group(1).replace("\\\n", " ").split()
    assert paths and all((ROOT / p).is_dir() for p in paths)
    assert "tests/benchmarks" not in paths  # the slowest package stays for `make test`
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    assert block is not None and [line.split()[:2] for line in block.group(1).splitlines()[:2]] == [
        ["make", "demo"],
        ["make", "test"],
    ]
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("make test")
