"""Every benchmark script runs end to end at a tiny scale and writes its JSON record: the commands that
BENCHMARKS.md quotes cannot break unnoticed. (train_throughput, precision, ct2_speed, precision_kernels,
native_kernels, decoder_only and gpu_kernels have their own smoke tests, which check their records too.)

Each run is seconds: tiny models, a few sentences, one round. The records go to a folder of the test's own
(`$ATTNLAB_RESULTS`), never over benchmarks/results/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_records import check_record
from train_helpers import DATA, SUBPROCESS_ENV, tiny_run

ROOT = Path(__file__).resolve().parents[2]
RUN = "{run}"  # the tiny trained run, for the scripts that measure a translator

# script -> (arguments at smoke size, what it needs beyond torch: "data", "run", or a module to import)
SMOKE: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "kernels/attention.py": (["--quick"], ()),
    "decoding/compile_decode.py": (
        ["--checkpoint", RUN, "--limit", "6", "--quick", "--step", "functional-eager"],
        ("run",),
    ),
    "decoding/constraints.py": (
        ["--checkpoint", RUN, "--limit", "6", "--rounds", "1", "--beam", "2", "--n-best", "2"],
        ("run",),
    ),
    "data/data.py": ([], ("data",)),
    "data/data_scale.py": (
        ["--sizes", "2000", "--rounds", "1", "--loader-batches", "3", "--train-steps", "1", "--process-steps", "1"]
        + ["--shard-size", "1000", "--workers", "1"],
        ("data",),
    ),
    "decoding/decode.py": (
        ["--rounds", "1", "--skip-uncached", "--sentences", "4", "--steps", "4", "--src-len", "5"],
        (),
    ),
    "quality/decode_levers.py": (
        ["--checkpoint", RUN, "--beams", "1,2", "--length-penalties", "1.0", "--limit", "6"],
        ("run",),
    ),
    "decoding/decode_profile.py": (["--checkpoint", RUN, "--limit", "6", "--rounds", "1", "--rows", "3"], ("run",)),
    "kernels/fused_qkv.py": (["--rounds", "1"], ()),
    "decoding/hf_decode.py": (["--rounds", "1", "--import-rounds", "0"], ("transformers", "sentencepiece")),
    "quality/positions.py": (
        ["--budget", "2", "--limit", "4", "--num-examples", "1500", "--schemes", "sinusoidal"],
        ("data",),
    ),
    "data/prepared_check.py": (["--sizes", "3000", "--repeats", "1"], ()),
    "serving/serve_attack.py": (
        ["--checkpoint", RUN, "--body-mb", "1", "--clients", "1", "--conns", "2", "--slow-seconds", "1"]
        + ["--hold-seconds", "0"],
        ("run", "fastapi", "uvicorn"),
    ),
    "serving/serve_load.py": (
        ["--checkpoint", RUN, "--clients", "2", "--requests", "2", "--rounds", "1", "--no-explain"],
        ("run", "fastapi"),
    ),
    "quality/time_to_quality.py": (
        ["--recipes", "laptop", "--budget", "2", "--points", "2", "--valid-limit", "6", "--num-examples", "1500"],
        ("data",),
    ),
    "serving/translate_cli.py": (
        ["--checkpoint", RUN, "--limit", "6", "--sizes", "4,8", "--rounds", "1", "--searches", "greedy"],
        ("run", "ctranslate2"),
    ),
    "training/train_precision.py": (["--threads", "1", "--steps", "1", "--rows", "2", "--batch-size", "4"], ()),
    "training/train_quality.py": (["--steps", "2"], ("data",)),
    "quality/vit_digits.py": (["--quick"], ("sklearn",)),
}
ELSEWHERE = {  # smoke-tested in test_benchmarks_smoke.py / test_precision_benchmark.py / export/test_onnx_speed.py
    "decoding/onnx_speed.py",
    "training/train_throughput.py",
    "decoding/precision.py",
    "decoding/ct2_speed.py",
    "kernels/precision_kernels.py",
    "kernels/native_kernels.py",
    "quality/decoder_only.py",
    "gpu/gpu_kernels.py",
    "gpu/gpu_decode.py",  # through gpu.sh --smoke (test_benchmarks_smoke.py)
}


def test_every_benchmark_script_has_a_smoke_run():
    scripts = {p.relative_to(ROOT / "benchmarks").as_posix() for p in (ROOT / "benchmarks").glob("*/*.py")}
    scripts -= {s for s in scripts if s.startswith("baselines/")}
    assert scripts - SMOKE.keys() - ELSEWHERE == set(), "add the new script to SMOKE with tiny arguments"
    assert not (SMOKE.keys() | ELSEWHERE) - scripts, "SMOKE names a script that is gone"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if not DATA or not Path(DATA).is_file():
        pytest.skip("set ATTNLAB_DATA to the fra-eng.zip corpus to train the tiny run")
    run = tmp_path_factory.mktemp("smoke") / "run"
    tiny_run(run)
    return run


# several fresh interpreters each: ~30 s quiet
SLOW = {"data/data_scale.py", "decoding/hf_decode.py", "quality/positions.py", "serving/translate_cli.py"}


@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=[pytest.mark.slow] if s in SLOW else []) for s in sorted(SMOKE)]
)
def test_script_runs_at_smoke_size_and_writes_its_record(script, tmp_path, request):
    args, needs = SMOKE[script]
    for module in (n for n in needs if n not in ("data", "run")):
        pytest.importorskip(module)
    if "data" in needs and (not DATA or not Path(DATA).is_file()):
        pytest.skip("set ATTNLAB_DATA to the fra-eng.zip corpus to run this benchmark")
    if "run" in needs:
        run = request.getfixturevalue("run_dir")
        args = [str(run) if a == RUN else a for a in args]
    results = tmp_path / "results"
    env = {
        **SUBPROCESS_ENV,
        "ATTNLAB_RESULTS": str(results),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, f"{script} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert "CPU features" in out.stdout and f"result: {results}" in out.stdout
    check_record(results, script, args)
