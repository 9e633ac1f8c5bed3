"""The check every benchmark smoke test makes of the JSON record its script wrote (`$ATTNLAB_RESULTS`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

KEYS = ("command", "cpu_features", "torch", "date", "figures")


def results_folder() -> Path:
    """Where this session's benchmark runs write (tests/conftest.py points `$ATTNLAB_RESULTS` at a temp folder)."""
    return Path(os.environ["ATTNLAB_RESULTS"])


def check_record(folder: Path, script: str, args: list[str]) -> dict:
    """The record `script` wrote into `folder`: the context keys, its command as run, and figures."""
    path = folder / f"{Path(script).stem}.json"
    assert path.is_file(), f"{script} wrote no record into {folder}"
    record = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in KEYS if k not in record]
    assert not missing, f"{script}'s record lacks {missing}"
    assert record["command"].startswith(f"python benchmarks/{script}"), record["command"]
    assert all(a in record["command"] for a in args if a.startswith("--")), record["command"]
    assert record["date"] and record["torch"] and isinstance(record["cpu_features"], list)
    assert record["figures"] and all(isinstance(r, dict) and r for r in record["figures"]), record["figures"]
    return record
