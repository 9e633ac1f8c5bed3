"""benchmarks/gpu/gpu_kernels.py --smoke on the CPU: every masked-attention backend is timed (the Triton kernel
interpreted), the fastest per case is printed as the table `attnlab.attention.backends.CUDA_BACKEND` takes,
and the record goes to a scratch folder, never to benchmarks/results/."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from attnlab.attention.backends import BACKENDS, CUDA_BACKEND

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_times_every_backend_and_prints_the_default_table():
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_RESULTS"}  # as gpu.sh --smoke runs it
    out = subprocess.run(
        [sys.executable, "benchmarks/gpu/gpu_kernels.py", "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    for path in (
        "SDPA + bool mask",
        "varlen (nested jagged SDPA)",
        "FlexAttention causal",
        "attnlab Triton flash causal",
    ):
        assert re.search(rf"^\| 20 +\| 2 +\| {re.escape(path)} +\| forward +\| \d", text, re.M), text
    for path in ("attnlab Triton flash", "varlen (nested jagged SDPA)"):
        assert re.search(rf"^\| 20 +\| 2 +\| {re.escape(path)} +\| forward \+ backward +\| \d", text, re.M), text
    # the line to paste into attention/backends.py: the same keys, backends it knows
    line = re.search(r"^CUDA_BACKEND = (\{.*\})  \(", text, re.M)
    assert line, text
    table = ast.literal_eval(line.group(1))
    assert table.keys() == CUDA_BACKEND.keys() and set(table.values()) <= set(BACKENDS)
    # a smoke run's record lands in a scratch folder
    where = Path(re.search(r"^result: (.+)$", text, re.M).group(1))
    assert where.parent != ROOT / "benchmarks" / "results" and where.is_file()
    record = json.loads(where.read_text())
    assert record["command"] == "python benchmarks/gpu/gpu_kernels.py --smoke"
    assert record["fastest"] and record["tables"][0]["caption"] == "masked attention backends"
