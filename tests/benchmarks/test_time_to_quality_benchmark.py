"""benchmarks/quality/time_to_quality.py at tiny scale (seconds): the curve mode (`laptop` one product run per
point, the tutorial recipe scored along one run) and the recipe search's `--valid-run ... --average K`,
each checked by the structure of the record it writes; and the ratio the curve reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import DATA, SUBPROCESS_ENV, needs_data

from attnlab.cli import main as attnlab
from attnlab.inference.precision import resolve_precision
from attnlab.training.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks" / "quality"), str(ROOT / "benchmarks"), str(ROOT / "tools")]

from render_benchmarks import formatted  # noqa: E402
from time_to_quality import SUMMARY_FORMATS, ratio_notes  # noqa: E402

SMALL = ["--num-examples", "3000", "--valid-limit", "20"]
LAPTOP = get_preset("transformer", "laptop")["train"]
PICKED = resolve_precision(LAPTOP["precision"], "cpu", training=True).picked


def bench(results: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**SUBPROCESS_ENV, "ATTNLAB_RESULTS": str(results)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    cmd = [sys.executable, "benchmarks/quality/time_to_quality.py", "--threads", "1", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


@needs_data
def test_the_curve_mode_trains_one_laptop_run_per_point_and_scores_both_recipes(tmp_path):
    results, runs, save = tmp_path / "results", tmp_path / "runs", tmp_path / "laptop-4"
    done = bench(results, "--points", "2,4", *SMALL, "--runs", str(runs), "--save", str(save))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads((results / "time_to_quality.json").read_text())
    assert (
        record["command"].startswith("python benchmarks/quality/time_to_quality.py")
        and "--points 2,4" in record["command"]
    )
    assert record["cpu_features"] is not None and record["torch"] and record["date"]
    rows = record["figures"]
    assert "tables" not in record  # the printed table is the figures, once
    assert [(r["recipe"], r["budget s"]) for r in rows] == [
        ("laptop", 2),
        ("laptop", 4),
        ("torch-tutorial", 2),
        ("torch-tutorial", 4),
    ]
    for r in rows:
        assert 0 <= r["valid BLEU greedy"] <= 100 and r["updates"] > 0 and r["trained s"] > 0
        laptop = r["recipe"] == "laptop"
        assert (r["valid BLEU beam 4"] is not None) == laptop
    # each laptop point is its own run with that time budget; the longest one lands in --save
    laptop, plain = record["recipes"]
    for point, folder in zip(laptop["curve"], (runs / "laptop-2s", save)):
        cfg = json.loads((folder / "config.json").read_text())
        assert point["run"] == str(folder) and cfg["train"]["time_budget"] == point["seconds"]
        assert point["stop"] == "time_budget" and point["train_s"] >= point["seconds"]
        assert (folder / "model.safetensors").is_file()
    assert not (runs / "laptop-4s").exists()
    # the tutorial recipe is one run, scored as it passes each point
    assert [p["seconds"] for p in plain["curve"]] == [2, 4]
    assert plain["curve"][0]["steps"] < plain["curve"][1]["steps"] and plain["curve"][1]["train_s"] >= 4
    assert "validation sources" in record["metric"]
    # a folder already there is never trained into: refused before any work
    again = bench(tmp_path / "again", "--points", "2", *SMALL, "--recipes", "laptop", "--save", str(save))
    assert again.returncode == 2 and "error:" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "again").exists()
    # the saved longest point is what the test figure scores, once
    test = bench(tmp_path / "test", "--test-run", str(save))
    assert test.returncode == 0, test.stderr[-3000:]
    assert "distinct sources of 3-10 words" in test.stdout and "beam 4: BLEU" in test.stdout


@pytest.fixture(scope="module")
def laptop_runs(tmp_path_factory):
    """Two tiny `laptop` runs (a few updates each, a checkpoint every 2 steps), as `attnlab train` makes them."""
    if not DATA or not Path(DATA).is_file():
        pytest.skip("set ATTNLAB_DATA to the fra-eng.zip corpus to train the tiny runs")
    base = tmp_path_factory.mktemp("search")
    runs = []
    for name, extra in (("d192", []), ("three-layers", ["--set", "model.num_layers=3"])):
        out = base / name
        argv = ["train", "--preset", "laptop", "--data", DATA, "--num-examples", "3000", "--max-steps", "6"]
        argv += ["--checkpoint-every", "2", "--set", "train.eval_limit=20", "--no-progress", "--out", str(out)]
        assert attnlab(argv + extra) == 0
        runs.append(out)
    return runs


def test_valid_run_writes_one_row_per_run_with_its_settings_scores_speed_and_average(laptop_runs, tmp_path):
    results = tmp_path / "results"
    done = bench(results, "--valid-run", *map(str, laptop_runs), "--average", "2", "--valid-limit", "20")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads((results / "laptop_search.json").read_text())
    assert record["title"] == "How `laptop` was chosen"
    assert record["command"].startswith("python benchmarks/quality/time_to_quality.py --threads 1 --valid-run")
    assert "--average 2" in record["command"] and isinstance(record["cpu_features"], list) and record["date"]
    rows = record["figures"]
    assert "tables" not in record
    assert [r["run"] for r in rows] == ["d192", "three-layers"]
    assert [r["layers"] for r in rows] == ["2 + 2", "3 + 3"]
    for r in rows:
        # what the preset asks for (auto: bf16 where this CPU has the units), as the run recorded it
        assert r["precision"] == PICKED and r["schedule"] == LAPTOP["schedule"] and r["d"] == 192
        assert r["steps"] == 6 and r["seconds"] >= 0 and r["beam 4 sent/s"] > 0 and 0 < r["sources"] <= 20
        for key in ("valid BLEU greedy", "valid BLEU beam 4", "last 2 averaged: greedy", "last 2 averaged: beam 4"):
            assert 0 <= r[key] <= 100, key
    assert not (results / "time_to_quality.json").exists()  # the curve's record is left alone


def test_valid_run_checks_every_run_before_scoring_any(laptop_runs, tmp_path):
    results = tmp_path / "results"
    done = bench(results, "--valid-run", str(laptop_runs[0]), str(tmp_path / "nope"), "--valid-limit", "20")
    assert done.returncode == 2 and "nope" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = bench(results, "--valid-run", str(laptop_runs[0]), "--average", "50", "--valid-limit", "20")
    assert done.returncode == 2 and "--average 50" in done.stderr and "kept 3 checkpoint" in done.stderr
    assert not results.exists()


def test_the_ratio_is_laptops_beam_4_over_the_tutorials_greedy_at_the_last_point():
    laptop = {"recipe": "laptop", "curve": [{"seconds": 600, "valid_bleu": 40.0, "valid_bleu_beam4": 44.0}]}
    curve = [{"seconds": 60, "valid_bleu": 1.0}, {"seconds": 600, "valid_bleu": 4}]
    plain = {"recipe": "torch-tutorial", "curve": curve}
    notes, summary = ratio_notes([laptop, plain])
    assert notes == ["laptop beam 4 / torch-tutorial greedy validation BLEU at 600 s: 44.00 / 4.00 = 11.00x"]
    assert summary[0]["measured"] == [44.0, 4.0, 11.0]
    assert formatted(summary, SUMMARY_FORMATS)[0]["measured"] == "44.00 against 4.00 (11.00×)"
    assert ratio_notes([laptop]) == ([], [])  # nothing to compare against
    assert ratio_notes([laptop, {**plain, "curve": [{"seconds": 600, "valid_bleu": 0.0}]}]) == ([], [])
