"""Under CI=true a skipped test (missing browser, missing corpus) is a failure, not a silent skip."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _run(tmp_path, ci: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_probe.py").write_text(
        textwrap.dedent("""
        import pytest

        @pytest.mark.skipif(True, reason="needs /usr/bin/chromium")
        def test_browser(): pass

        def test_corpus():
            pytest.skip("set ATTNLAB_DATA to the shared fra-eng.zip")

        @pytest.mark.xfail(strict=False, reason="fixed elsewhere")
        def test_known(): assert False
    """),
        encoding="utf-8",
    )
    env = {"PATH": "/usr/bin:/bin", "CI": ci}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_skips_fail_under_ci(tmp_path):
    res = _run(tmp_path, "true")
    assert res.returncode == 1, res.stdout
    # a skipif fires in setup, so pytest counts that one as an error: both count against the run
    assert "1 failed" in res.stdout and "1 error" in res.stdout and "1 xfailed" in res.stdout, res.stdout
    assert "needs /usr/bin/chromium" in res.stdout and "ATTNLAB_DATA" in res.stdout


def test_skips_stay_skips_off_ci(tmp_path):
    res = _run(tmp_path, "")
    assert res.returncode == 0, res.stdout
    assert "2 skipped" in res.stdout and "1 xfailed" in res.stdout, res.stdout
