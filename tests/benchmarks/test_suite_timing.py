"""tools/suite_timing.py: a JUnit report becomes the slowest tests and each package's share, docs/testing.md's
timing section is rendered from the record (or says how to make it), and a real pytest run goes through."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import suite_timing  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.data.test_data" name="test_load" time="3.5"/>
<testcase classname="tests.data.test_data" name="test_skip" time="0.01"><skipped message="no corpus"/></testcase>
<testcase classname="tests.serve.test_app" name="test_page[a]" time="6.0"><failure message="x"/></testcase>
<testcase classname="tests.test_readme" name="test_blocks" time="0.5"/>
</testsuite></testsuites>"""


def test_junit_report_becomes_the_slowest_tests_and_package_shares(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(JUNIT, encoding="utf-8")
    cases = suite_timing.parse_junit(xml)
    rows, shares = suite_timing.summarize(cases)
    assert [r["test"] for r in rows] == [
        "tests/serve/test_app.py::test_page[a]",
        "tests/data/test_data.py::test_load",
        "tests/test_readme.py::test_blocks",
        "tests/data/test_data.py::test_skip",
    ]
    assert [r["outcome"] for r in rows] == ["failure", "passed", "passed", "skipped"]
    assert [(s["package"], s["tests"], s["share"]) for s in shares] == [
        ("tests/serve", 1, 59.9),
        ("tests/data", 2, 35.1),
        ("tests (the root's files)", 1, 5.0),
    ]


def test_committed_page_shows_the_record_or_how_to_make_it():
    page = suite_timing.PAGE.read_text(encoding="utf-8")
    rendered = suite_timing.render_page(page, suite_timing.load_record())
    assert rendered == page, "run python tools/suite_timing.py --render"
    if suite_timing.load_record() is None:
        assert suite_timing.PLACEHOLDER in page


def test_a_page_without_markers_is_refused():
    with pytest.raises(SystemExit, match="no timing markers"):
        suite_timing.render_page("# Tests\n", None)


def test_a_timed_run_writes_the_record_and_renders_the_page(tmp_path):
    tests = tmp_path / "tests" / "demo"
    tests.mkdir(parents=True)
    (tests / "test_x.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    assert 1\n", encoding="utf-8")
    page = tmp_path / "testing.md"
    page.write_text(f"# T\n\n{suite_timing.BEGIN}\nold\n{suite_timing.END}\n\nafter\n", encoding="utf-8")
    record = tmp_path / "suite.json"
    argv = [sys.executable, str(ROOT / "tools" / "suite_timing.py"), str(tests), "--record", str(record)]
    argv += ["--page", str(page), "--pytest-args", f"-p no:cacheprovider --rootdir {tmp_path}"]
    subprocess.run(argv, check=True, capture_output=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    saved = json.loads(record.read_text(encoding="utf-8"))
    assert saved["counts"]["passed"] == 2 and saved["exit_status"] == 0 and saved["wall_s"] > 0
    assert saved["paths"] == [str(tests)] and len(saved["figures"]) == 2
    text = page.read_text(encoding="utf-8")
    assert "A subset of the suite" in text and "2 passed, 0 skipped, 0 failed" in text and "old" not in text
    assert text.endswith("\n\nafter\n") and "| package | tests | seconds | share |" in text
