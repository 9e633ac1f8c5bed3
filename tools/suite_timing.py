"""Time the test suite and render docs/testing.md's timing section from the measurement, as data.

    flock /tmp/attnlab-measure.lock python tools/suite_timing.py          # the whole suite (`make test-timing`)
    python tools/suite_timing.py tests/benchmarks                         # a subset: the record says which
    python tools/suite_timing.py --render                                 # only re-render docs/testing.md

It runs `python -m pytest -q --durations=20 --junitxml=...` on the given paths (default: the whole suite),
times the whole process, and writes benchmarks/results/suite.json: the command, the machine (CPU count,
features, load before and after), the wall time and outcome counts, the 20 slowest tests (`figures`) and
each test package's share of the summed test time (`tables`). Then it rewrites the part of docs/testing.md
between the two `suite-timing` markers from that record.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "suite.json"
PAGE = ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- suite-timing: begin (python tools/suite_timing.py) -->", "<!-- suite-timing: end -->"
PLACEHOLDER = (
    "Not measured yet: run `make test-timing` (the whole suite under `flock /tmp/attnlab-measure.lock`, "
    "on a quiet 2-core machine) to fill this section from `benchmarks/results/suite.json`."
)
SLOWEST = 20


def cpu_features() -> list[str]:
    """The /proc/cpuinfo flags that matter to speed (vector width, VNNI, BF16, AMX)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in set(flags) if f.startswith(("avx2", "avx512", "avx_vnni", "amx")))


def parse_junit(path: Path) -> list[dict]:
    """One dict per test case: its id (file::name), seconds, and outcome."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        module = case.get("classname", "").replace(".", "/")
        cases.append(
            {"test": f"{module}.py::{case.get('name')}", "seconds": float(case.get("time", 0)), "outcome": outcome}
        )
    return cases


SHARE = {"share": "{:.1f}%"}  # a package's share of the summed test time, a percentage


def summarize(cases: list[dict]) -> tuple[list[dict], list[dict]]:
    """The slowest tests, and each test package's (tests/<folder>) share of the summed test time."""
    slowest = sorted(cases, key=lambda c: -c["seconds"])[:SLOWEST]
    rows = [{"test": c["test"], "seconds": round(c["seconds"], 1), "outcome": c["outcome"]} for c in slowest]
    total = sum(c["seconds"] for c in cases) or 1.0
    by_package: dict[str, list[float]] = defaultdict(list)
    for c in cases:
        parts = c["test"].split("::")[0].split("/")
        by_package["/".join(parts[:2]) if len(parts) > 2 else "tests (the root's files)"].append(c["seconds"])
    shares = [
        {"package": name, "tests": len(ts), "seconds": round(sum(ts), 1), "share": round(100 * sum(ts) / total, 1)}
        for name, ts in sorted(by_package.items(), key=lambda kv: -sum(kv[1]))
    ]
    return rows, shares


def measure(paths: list[str], extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="attnlab-suite-") as tmp:
        xml = Path(tmp) / "junit.xml"
        argv = [sys.executable, "-m", "pytest", "-q", f"--durations={SLOWEST}", f"--junitxml={xml}", *extra, *paths]
        load_before = os.getloadavg()[0]
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, check=False)
        wall = time.monotonic() - t0
        cases = parse_junit(xml) if xml.is_file() else []
    rows, shares = summarize(cases)
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failure", "error", "skipped")}
    shown = ["python", "-m", "pytest", "-q", f"--durations={SLOWEST}", "--junitxml=FILE", *extra, *paths]
    return {
        "title": "The test suite",
        "page": "docs/testing.md",
        "command": shlex.join(shown),
        "paths": paths or ["(the whole suite)"],
        "cpu_features": cpu_features(),
        "cpus": os.cpu_count(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "torch": _torch_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": f"{load_before:.2f} → {os.getloadavg()[0]:.2f}",
        "wall_s": round(wall, 1),
        "exit_status": proc.returncode,
        "counts": counts,
        "figures": rows,
        "tables": [
            {"caption": "Each test package's share of the summed test time", "figures": shares, "formats": SHARE}
        ],
    }


def _torch_version() -> str | None:
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True)
    except OSError:
        return None
    return out.stdout.decode().strip() or None


def section(record: dict | None) -> str:
    """docs/testing.md's timing section: the wall time and its command, the slowest tests, the shares."""
    if record is None:
        return PLACEHOLDER
    c = record["counts"]
    whole = record["paths"] == ["(the whole suite)"]
    what = "`make test` (the whole suite)" if whole else f"A subset of the suite ({', '.join(record['paths'])})"
    lines = [
        f"{what} took **{_minutes(record['wall_s'])}** wall time on {record['machine']} (load {record['load']}), "
        f"{record['date']}: {c['passed']} passed, {c['skipped']} skipped, {c['failure'] + c['error']} failed. "
        "Measured with:",
        "",
        "```bash",
        " ".join(["flock /tmp/attnlab-measure.lock python tools/suite_timing.py", *([] if whole else record["paths"])]),
        f"# runs: {record['command']}",
        "```",
        "",
        f"The {len(record['figures'])} slowest tests:",
        "",
        "| test | seconds | outcome |",
        "|---|---|---|",
        *(f"| `{r['test']}` | {r['seconds']} | {r['outcome']} |" for r in record["figures"]),
        "",
        "Where the time goes, per test package (summed test time; the wall time adds collection and start-up):",
        "",
        "| package | tests | seconds | share |",
        "|---|---|---|---|",
        *(
            f"| `{r['package']}` | {r['tests']} | {r['seconds']} | {SHARE['share'].format(r['share'])} |"
            for r in record["tables"][0]["figures"]
        ),
    ]
    return "\n".join(lines)


def _minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def render_page(text: str, record: dict | None) -> str:
    """`text` (docs/testing.md) with the part between the markers replaced by `section(record)`."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE} has no timing markers ({BEGIN} ... {END}); add them where the section goes")
    return pattern.sub(lambda _: f"{BEGIN}\n{section(record)}\n{END}", text)


def load_record(path: Path = RECORD) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="test paths (default: the whole suite)")
    ap.add_argument("--render", action="store_true", help="only re-render docs/testing.md from the record")
    ap.add_argument("--record", type=Path, default=RECORD, help="where the record goes (default %(default)s)")
    ap.add_argument("--page", type=Path, default=PAGE)
    ap.add_argument(
        "--pytest-args", default="-p no:cacheprovider -n 2 --dist loadfile", help="more pytest arguments, one string"
    )
    args = ap.parse_args(argv)
    if not args.render:
        record = measure(args.paths, shlex.split(args.pytest_args))
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"suite: {_minutes(record['wall_s'])} wall, exit status {record['exit_status']}; wrote {args.record}")
    page = render_page(args.page.read_text(encoding="utf-8"), load_record(args.record))
    args.page.write_text(page, encoding="utf-8")
    print(f"rendered {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
