"""The benchmarks' layout: scripts in a folder per subject, and every `benchmarks/...` path that the README,
the docs, the frame, the page and the records name exists (a moved script leaves no stale command)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
MENTION = re.compile(r"(?<![\w/.-])benchmarks/[\w./-]*[\w/]")  # not tests/benchmarks/
# What the commands write, absent from a checkout until they run.
OUTPUTS = ("benchmarks/results/gpu", "benchmarks/results/smoke", "benchmarks/results/latest.txt")


def mentions(text: str) -> set[str]:
    return {m for m in MENTION.findall(text) if not m.startswith(OUTPUTS)}


def test_every_benchmarks_path_named_by_the_docs_and_records_exists():
    results = BENCHMARKS / "results"
    sources = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "BENCHMARKS.md", BENCHMARKS / "frame.md"]
    sources += (
        sorted((ROOT / "docs").glob("*.md")) + sorted(results.glob("*.json")) + sorted(results.glob("gpu/*.json"))
    )
    named = {(m, path.relative_to(ROOT).as_posix()) for path in sources for m in mentions(path.read_text("utf-8"))}
    assert len({m for m, _ in named}) >= 20  # the scan finds the commands
    missing = sorted(f"{where}: {m}" for m, where in named if not (ROOT / m).exists())
    assert not missing, "paths that do not exist (a script moved? update its mentions):\n" + "\n".join(missing)


def test_scripts_live_in_a_folder_per_subject():
    assert {p.name for p in BENCHMARKS.glob("*.py")} == {"common.py", "run_all.py"}  # the shared helpers only
    subjects = {p.parent.name for p in BENCHMARKS.glob("*/*.py")} - {"baselines"}
    assert subjects == {"kernels", "decoding", "training", "quality", "data", "serving", "gpu"}, subjects


def test_the_scan_sees_a_stale_path():
    text = "`python benchmarks/decode.py` (now benchmarks/decoding/decode.py; benchmarks/results/gpu/x.json"
    text += " and tests/benchmarks/test_paths.py)."
    assert mentions(text) == {"benchmarks/decode.py", "benchmarks/decoding/decode.py"}
    assert not (ROOT / "benchmarks/decode.py").exists() and (ROOT / "benchmarks/decoding/decode.py").exists()


def test_a_script_records_its_path_and_its_numbers_with_their_formats(tmp_path, monkeypatch):
    """common.table keeps numbers and prints them as the page does; write_result names the script by its path
    from the repository root (`benchmarks/<subject>/<name>.py`), with the main table's formats."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import common
    import render_benchmarks

    monkeypatch.setattr(common, "_TABLES", [])
    monkeypatch.setenv("ATTNLAB_RESULTS", str(tmp_path))
    formats = {"vs best": "{:.2f}×"}
    printed = common.table(["search", "vs best"], [["greedy", 1.0234], ["beam", "—"]], formats=formats)
    assert "| greedy | 1.02×   |" in printed and "| beam   | —       |" in printed
    common.table(["idea", "vs kept"], [["other", 0.9]], file_only=True)
    path = common.write_result(str(BENCHMARKS / "decoding" / "example.py"), ["--rounds", "2"], main=0)
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["command"] == "python benchmarks/decoding/example.py --rounds 2"
    assert record["figures"] == [{"search": "greedy", "vs best": 1.0234}, {"search": "beam", "vs best": "—"}]
    assert record["formats"] == formats and record["tables"][0]["file_only"] is True
    page = render_benchmarks.table(record["figures"], record["formats"])
    assert page[2:] == ["| greedy | 1.02× |", "| beam | — |"]
