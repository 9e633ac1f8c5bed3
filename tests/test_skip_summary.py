"""Off CI, the run's summary says how many tests skipped for want of the corpus (or Chromium) and how to give it."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent

PROBES = """
import pytest

@pytest.mark.parametrize("n", range(3))
def test_corpus(n):
    pytest.skip("set ATTNLAB_DATA to the shared fra-eng.zip")

@pytest.mark.skipif(True, reason="needs /usr/bin/chromium and /usr/bin/chromedriver")
def test_browser(): pass

def test_fine(): pass
"""


def _run(tmp_path, files: dict[str, str]) -> str:
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text(encoding="utf-8"), encoding="utf-8")
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CI": ""},
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout
    return res.stdout


def test_the_summary_counts_the_skips_for_want_of_the_corpus(tmp_path):
    out = _run(tmp_path, {"test_probe.py": PROBES})
    assert "3 test(s) skipped for want of the English–French corpus: set ATTNLAB_DATA=PATH/fra-eng.zip" in out, out
    assert "1 test(s) skipped for want of Chromium" in out, out


def test_nothing_is_said_when_nothing_skipped(tmp_path):
    out = _run(tmp_path, {"test_probe.py": "def test_fine(): pass\n"})
    assert "skipped for want of" not in out, out
