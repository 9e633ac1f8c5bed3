"""What a skip means (tests/conftest.py). Under CI=true a skipped test (missing browser, corpus or optional
package) is a failure, not a silent skip: inside a test, and while collecting a module or a folder whose
conftest.py skips at import. Off CI, the run's summary says how many tests skipped for want of the corpus (or
Chromium) and how to give it."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

IN_TESTS = """
import pytest

@pytest.mark.skipif(True, reason="needs /usr/bin/chromium")
def test_browser(): pass

def test_corpus():
    pytest.skip("set ATTNLAB_DATA to the shared fra-eng.zip")

def test_no_procfs():
    pytest.skip("no-procfs: no /proc/cpuinfo here")

@pytest.mark.xfail(strict=False, reason="fixed elsewhere")
def test_known(): assert False
"""


PROBES = """
import pytest

@pytest.mark.parametrize("n", range(3))
def test_corpus(n):
    pytest.skip("set ATTNLAB_DATA to the shared fra-eng.zip")

@pytest.mark.skipif(True, reason="needs /usr/bin/chromium and /usr/bin/chromedriver")
def test_browser(): pass

def test_fine(): pass
"""


# As CI runs the suite (`make test`): two worker processes, whole files each. The rule must hold there too,
# where the reports are made in the workers and the summary in the controller.
XDIST = ["-n", "2", "--dist", "loadfile"]


def _run(tmp_path, ci: str, files: dict[str, str], *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text(encoding="utf-8"), encoding="utf-8")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "CI": ci}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *options, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("options", [[], XDIST], ids=["one-process", "xdist"])
def test_skips_fail_under_ci(tmp_path, options):
    res = _run(tmp_path, "true", {"test_probe.py": IN_TESTS}, *options)
    assert res.returncode == 1, res.stdout
    # a skipif fires in setup, so pytest counts that one as an error: both count against the run;
    # the skip under a rule named in ALLOWED_CI_SKIPS stays a skip
    assert "1 failed" in res.stdout and "1 error" in res.stdout and "1 xfailed" in res.stdout, res.stdout
    assert "1 skipped" in res.stdout and "no-procfs" in res.stdout, res.stdout
    assert "needs /usr/bin/chromium" in res.stdout and "ATTNLAB_DATA" in res.stdout


def test_skips_stay_skips_off_ci(tmp_path):
    res = _run(tmp_path, "", {"test_probe.py": IN_TESTS})
    assert res.returncode == 0, res.stdout
    assert "3 skipped" in res.stdout and "1 xfailed" in res.stdout, res.stdout


MODULE_SKIP = {
    "test_module.py": """
        import pytest
        pytest.importorskip("attnlab_absent_package")
        def test_parity(): pass
    """,
    "test_other.py": "def test_fine(): pass\n",
}
# a folder (a package, like tests/export/) whose conftest.py skips while importing
CONFTEST_SKIP = {
    "pkg/__init__.py": "",
    "pkg/conftest.py": "import pytest\npytest.importorskip('attnlab_absent_package')\n",
    "pkg/test_inside.py": "def test_parity(): pass\n",
    "test_other.py": "def test_fine(): pass\n",
}


@pytest.mark.parametrize("options", [[], XDIST], ids=["one-process", "xdist"])
def test_module_level_skip_fails_under_ci(tmp_path, options):
    res = _run(tmp_path, "true", MODULE_SKIP, *options)
    assert res.returncode != 0, res.stdout
    assert "skipped while collecting under CI=true" in res.stdout, res.stdout
    assert "attnlab_absent_package" in res.stdout and "[dev]" in res.stdout, res.stdout


def test_conftest_skip_fails_under_ci(tmp_path):
    res = _run(tmp_path, "true", CONFTEST_SKIP)
    assert res.returncode != 0, res.stdout
    assert "skipped while collecting under CI=true" in res.stdout and "attnlab_absent_package" in res.stdout


def test_collection_skips_stay_skips_off_ci(tmp_path):
    res = _run(tmp_path, "", {**MODULE_SKIP, **CONFTEST_SKIP})
    assert res.returncode == 0, res.stdout
    assert "2 skipped" in res.stdout and "1 passed" in res.stdout, res.stdout


@pytest.mark.parametrize("options", [[], XDIST], ids=["one-process", "xdist"])
def test_the_summary_counts_the_skips_for_want_of_the_corpus(tmp_path, options):
    res = _run(tmp_path, "", {"test_probe.py": PROBES}, *options)
    assert res.returncode == 0, res.stdout
    out = res.stdout
    assert "3 test(s) skipped for want of the English–French corpus: set ATTNLAB_DATA=PATH/fra-eng.zip" in out, out
    assert "1 test(s) skipped for want of Chromium" in out, out


def test_nothing_is_said_when_nothing_skipped(tmp_path):
    res = _run(tmp_path, "", {"test_probe.py": "def test_fine(): pass\n"})
    assert res.returncode == 0, res.stdout
    out = res.stdout
    assert "skipped for want of" not in out, out
