"""The benchmark scripts run end to end at smoke sizes and print their ratio lines."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_records import check_record, results_folder

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd, env=None, timeout=180):
    out = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    assert out.returncode == 0, f"{cmd} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_train_throughput_quick_prints_ratios():
    out = _run([sys.executable, "benchmarks/training/train_throughput.py", "--quick"])
    assert out.startswith("command: python benchmarks/training/train_throughput.py --quick")
    for baseline in ("nn.Transformer", "book \\(d2l\\)"):
        assert re.search(rf"^ratio: attnlab / {baseline} = \d+\.\d\dx target tokens/s$", out, re.M), out
    record = check_record(results_folder(), "training/train_throughput.py", ["--quick"])
    assert [row["model"] for row in record["figures"]] == ["attnlab", "nn.Transformer", "book (d2l)"]


def test_train_throughput_plain_dropout_is_timed_in_the_same_run():
    out = _run([sys.executable, "benchmarks/training/train_throughput.py", "--quick", "--plain-dropout", "--no-book"])
    assert re.search(r"^ratio: attnlab / attnlab nn\.Dropout = \d+\.\d\dx target tokens/s$", out, re.M), out


def test_train_throughput_rejects_bad_lengths():
    out = subprocess.run(
        [sys.executable, "benchmarks/training/train_throughput.py", "--min-len", "9", "--max-len", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "--min-len" in out.stderr


def test_run_all_lists_every_benchmark():
    out = _run([sys.executable, "benchmarks/run_all.py", "--list"])
    lines = out.splitlines()
    assert any(line.startswith("python benchmarks/training/train_throughput.py --steps 3 --warmup 1") for line in lines)
    assert not any("gpu_" in line or "run_all" in line or "common" in line for line in lines)
    folders = [p for p in (ROOT / "benchmarks").iterdir() if p.is_dir() and p.name not in ("baselines", "gpu")]
    scripts = {p.relative_to(ROOT / "benchmarks").as_posix() for folder in folders for p in folder.glob("*.py")}
    assert {line.split()[1].removeprefix("benchmarks/") for line in lines} == scripts


def test_run_all_plan_uses_only_flags_the_scripts_have():
    """`make bench` must not die on a renamed flag (it once passed decode.py a --repeats it no longer had)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run_all
    finally:
        sys.path.pop(0)
    common = (ROOT / "benchmarks" / "common.py").read_text()
    for name, args in run_all.PLAN.items():
        source = (ROOT / "benchmarks" / name).read_text() + common
        for flag in (a for a in args if a.startswith("--")):
            assert f'"{flag}"' in source, f"run_all passes {flag} to {name}, which does not define it"


@pytest.mark.slow
def test_gpu_script_smoke_on_cpu(tmp_path):
    data = os.environ.get("ATTNLAB_DATA") or str(ROOT.parent / "shared" / "data" / "fra-eng.zip")
    if not Path(data).exists():
        pytest.skip("the fra-eng corpus is absent (set ATTNLAB_DATA)")
    out_dir = tmp_path / "out"
    out = _run(
        ["bash", "benchmarks/gpu/gpu.sh", "--smoke"],
        env={
            "ATTNLAB_DATA": data,
            "OUT": str(out_dir),
            "RUN_DIR": str(tmp_path / "run"),
            "GPU_TRAIN_SECONDS": "2",  # the script end to end; how well it trains is the GPU run's
            "PYTHON": sys.executable,
        },
    )
    assert f"python: {sys.executable} " in out
    assert re.search(r"^ratio: L=\d+: attnlab fused / raw SDPA flash = \d+\.\d\d", out, re.M), out
    assert re.search(r"^ratio: attnlab / nn\.Transformer = \d+\.\d\dx", out, re.M), out
    assert re.search(r"^MFU: attnlab \d+\.\d %", out, re.M), out
    assert re.search(r"^ratio: static greedy: [\d,]+ sentences/s", out, re.M), out
    assert re.search(r"^  beam 4: BLEU \d+\.\d\d", out, re.M), out
    # Smoke records go to a scratch folder (here the suite's), never over benchmarks/results/.
    records = Path(re.search(r"^records: (.+)$", out, re.M).group(1))
    assert records == results_folder()
    steps = json.loads((records / "gpu.json").read_text())["figures"]
    assert [s["step"] for s in steps] == [
        "kernels", "train_throughput", "train", "valid_bleu", "test_bleu", "decode"
    ] and all(s["status"] == "ok" for s in steps), steps  # fmt: skip
    for name in ("gpu_valid", "gpu_test", "gpu_decode", "train_throughput"):
        assert (records / f"{name}.json").is_file(), name
    # Everything printed also lands in $OUT/gpu_results.txt, and the records in $OUT/results/.
    saved = (out_dir / "gpu_results.txt").read_text()
    assert "MFU: attnlab" in saved and "ratio: attnlab / nn.Transformer" in saved
    assert (out_dir / "results" / "gpu.json").is_file()
    check_record(results_folder(), "gpu/gpu_kernels.py", [])


def test_gpu_script_explains_missing_data(tmp_path):
    out = subprocess.run(
        ["bash", "benchmarks/gpu/gpu.sh", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ATTNLAB_DATA": str(tmp_path / "missing.zip")},
    )
    assert out.returncode == 2
    assert "ATTNLAB_DATA" in out.stderr and "not found" in out.stderr


def test_gpu_script_uses_the_python_it_is_given_and_installs_nothing(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "benchmarks" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "gpu" / "gpu.sh", checkout / "benchmarks" / "gpu" / "gpu.sh")
    data = tmp_path / "fra-eng.zip"
    data.write_bytes(b"")  # found; never read, as the interpreter is refused first
    no_torch = tmp_path / "python"
    no_torch.write_text(f'#!/bin/sh\nexec {sys.executable} -S -I "$@"\n')  # no site-packages: no torch
    no_torch.chmod(0o755)
    out = subprocess.run(
        ["bash", str(checkout / "benchmarks" / "gpu" / "gpu.sh"), "--smoke"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ATTNLAB_DATA": str(data), "PYTHON": str(no_torch)},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"gpu.sh: {no_torch} has no torch" in out.stderr and out.stderr.count("\n") == 1
    assert not (checkout / ".venv").exists()  # no environment made, nothing installed


@pytest.mark.slow
def test_decoder_only_comparison_smoke():
    data = os.environ.get("ATTNLAB_DATA") or str(ROOT.parent / "shared" / "data" / "fra-eng.zip")
    if not Path(data).exists():
        pytest.skip("the fra-eng corpus is absent (set ATTNLAB_DATA)")
    # Each model trains 1.5 s on one thread (the suite's other process has the other core): the script's every
    # step and line, not the models' quality.
    args = ["--budget", "1.5", "--points", "1.5", "--num-examples", "2000", "--valid-limit", "20", "--rounds", "1"]
    args += ["--threads", "1"]
    out = _run([sys.executable, "benchmarks/quality/decoder_only.py", *args], env={"ATTNLAB_DATA": data})
    assert out.startswith("command: python benchmarks/quality/decoder_only.py --budget 1.5")
    assert "CPU features:" in out and "decoder-only blocks: " in out
    for name in ("decoder-only causal", "decoder-only prefix-LM"):
        assert re.search(rf"^ratio: {name} / encoder-decoder = \d+\.\d\dx greedy sentences/s$", out, re.M), out
    assert re.search(r"^chosen on validation: ", out, re.M), out
    check_record(results_folder(), "quality/decoder_only.py", args)


@pytest.mark.usefixtures("c_kernels")
def test_native_kernels_benchmark_times_each_kernel_against_pytorch():
    out = _run(
        [sys.executable, "benchmarks/kernels/native_kernels.py", "--rounds", "1", "--reps", "1", "--batch", "12"]
    )
    assert "CPU features:" in out and "C kernel few_queries: built with" in out
    rows = [line for line in out.splitlines() if line.startswith("| one query") or line.startswith("| encoder")]
    assert len(rows) == 17, out
    others = [line for line in out.splitlines() if line.startswith(("| add + LayerNorm", "| pick"))]
    assert len(others) == 7, out
    for row in rows + others:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[3].endswith("x")
        assert float(cells[4]) < (0.1 if "bf16" in row else 1e-4), row  # what PyTorch computes (bf16: its rounding)
    record = check_record(results_folder(), "kernels/native_kernels.py", ["--rounds", "--reps", "--batch"])
    assert len(record["figures"]) == 24, record["figures"]  # every row of the printed table
