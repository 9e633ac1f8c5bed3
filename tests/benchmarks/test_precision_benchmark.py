"""benchmarks/precision.py and benchmarks/ct2_speed.py run end to end on a tiny run and print their tables."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import SUBPROCESS_ENV, needs_data, tiny_run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [needs_data, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_thread):
    run = tmp_path_factory.mktemp("bench") / "run"
    tiny_run(run)
    return run


def _bench(script, run_dir, *extra):
    env = {**SUBPROCESS_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [
            sys.executable,
            f"benchmarks/{script}",
            "--checkpoint",
            str(run_dir),
            "--limit",
            "8",
            "--rounds",
            "1",
            "--threads",
            "1",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_precision_benchmark_prints_speed_and_bleu(run_dir):
    out = _bench("precision.py", run_dir)
    assert "CPU features:" in out and "native bf16:" in out
    for name in ("| fp32 ", "| bf16 ", "| int8 ", "| int8 (every Linear) "):
        assert name in out
    assert "8/8" in out  # fp32 agrees with itself: the agreement column is computed, not assumed


def test_ctranslate2_benchmark_compares_engines(run_dir):
    pytest.importorskip("ctranslate2")
    extra = ("--threads", "2", "--attnlab", "fp32:b4,fp32:b4:w2", "--ct2", "float32:b4,int8:b4:w2")
    out = _bench("ct2_speed.py", run_dir, *extra)
    assert "| CTranslate2 float32:b4 |" in out and "| attnlab fp32:b4 " in out
    for engine in ("CTranslate2 float32:b4 ", "CTranslate2 int8:b4:w2", "attnlab fp32:b4:w2"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {engine}"))
        if "int8" not in engine:  # the export, and attnlab's workers, decode like attnlab fp32
            assert row.rstrip(" |").endswith("8/8"), row
    assert "best attnlab" in out


def test_ctranslate2_benchmark_floors(run_dir):
    """--floors adds, per attnlab engine, the replay of its linear layers (and with attention) as rows."""
    pytest.importorskip("ctranslate2")
    extra = ("--threads", "2", "--floors", "--attnlab", "fp32:b4:w2,int8 (every Linear):b4", "--ct2", "float32:b4")
    out = _bench("ct2_speed.py", run_dir, *extra)
    lines = out.splitlines()
    for engine in ("fp32:b4:w2", "int8 (every Linear):b4"):
        for what in ("its linear layers only (floor)", "its linear layers + attention (floor)"):
            row = next(line for line in lines if line.startswith(f"| attnlab {engine}, {what}"))
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert float(cells[1]) > 0 and cells[-1] == "-", row  # timed; no tokens to compare
    best = next(line for line in lines if line.startswith("best floor"))
    assert "its linear layers only (floor)" in best and "CTranslate2 float32:b4" in best
