"""benchmarks/decoding/onnx_speed.py at tiny scale: it times attnlab and onnxruntime on a tiny run's test split, finds
their greedy tokens identical, and writes its result as one JSON object of the benchmarks' shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from attnlab.testing import train_tiny

ROOT = Path(__file__).resolve().parents[2]


def test_onnx_speed_smoke(tmp_path):
    run = train_tiny(tmp_path / "tiny", steps=10)
    out = tmp_path / "onnx_speed.json"
    cmd = [
        sys.executable,
        "benchmarks/decoding/onnx_speed.py",
        "--checkpoint",
        str(run),
        "--rounds",
        "1",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "token identity onnxruntime fp32 vs attnlab fp32: 100.0000%" in done.stdout, done.stdout
    result = json.loads(out.read_text())
    assert set(result) == {"command", "cpu_features", "torch", "date", "figures"}
    engines = {e["engine"]: e for e in result["figures"]["engines"]}
    assert set(engines) == {"attnlab fp32", "onnxruntime fp32", "onnxruntime int8"}
    n = result["figures"]["sentences"]
    assert n > 0 and engines["onnxruntime fp32"]["identical_to_attnlab_fp32"] == n
    assert all(e["sentences_per_s"] > 0 for e in engines.values())
