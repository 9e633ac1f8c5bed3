"""Run every benchmark script in sequence at sizes that fit 10 minutes on 2 CPU cores (`make bench`).

Each script prints its own ratios against its named baselines, with the command that made them; this
runner prints each command before its output and tees everything to benchmarks/results/latest.txt. The
records the scripts write at these sizes go to benchmarks/results/smoke/ (`$ATTNLAB_RESULTS`), not over the
measured benchmarks/results/*.json that BENCHMARKS.md is rendered from (neither is committed).

    python benchmarks/run_all.py                 # all of them, within 570 s (docs/testing.md: as measured)
    python benchmarks/run_all.py --only train_throughput attention
    python benchmarks/run_all.py --list          # what would run, with which arguments
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "latest.txt"
SMOKE_RECORDS = HERE / "results" / "smoke"

# script -> arguments sized for the 10-minute budget (the full runs are in each script's docstring and in
# BENCHMARKS.md). Every script must be listed: a new one without a plan is an error, so none is run with
# flags it does not have. RUN stands for a tiny Transformer run trained once at the start (~20 s), for the
# scripts that measure a trained model.
RUN = "{run}"
PLAN: dict[str, list[str]] = {
    "kernels/attention.py": ["--quick"],
    "training/train_throughput.py": ["--steps", "3", "--warmup", "1", "--d", "128", "--layers", "2", "--ffn", "512"]
    + ["--vocab", "4000", "--batch-size", "32"],  # the page's second shapes, fewer rounds
    "training/train_precision.py": ["--threads", "2", "--steps", "2"],
    "training/train_quality.py": ["--steps", "20"],
    "decoding/decode.py": ["--rounds", "2", "--skip-uncached"],
    "data/data.py": [],
    "serving/serve_load.py": ["--clients", "32", "--requests", "10"],  # the load: 32 clients x 10 requests
    "kernels/fused_qkv.py": ["--rounds", "3"],
    "decoding/precision.py": ["--checkpoint", RUN, "--rounds", "1", "--limit", "100"],
    "kernels/precision_kernels.py": ["--rounds", "1", "--rows", "1,64", "--shapes", "192x384,192x4000"],
    "kernels/native_kernels.py": ["--rounds", "1", "--reps", "2", "--batch", "12"],
    "decoding/decode_profile.py": [
        "--checkpoint",
        RUN,
        "--split",
        "valid",
        "--limit",
        "50",
        "--rounds",
        "1",
        "--rows",
        "5",
    ],
    "decoding/compile_decode.py": ["--checkpoint", RUN, "--split", "valid", "--limit", "50", "--quick"],
    "decoding/ct2_speed.py": ["--checkpoint", RUN, "--rounds", "1", "--limit", "100", "--floors"],
    "decoding/onnx_speed.py": [
        "--checkpoint",
        RUN,
        "--rounds",
        "1",
        "--limit",
        "100",
        "--out",
        "benchmarks/results/onnx_speed.json",
    ],
    "serving/serve_attack.py": ["--checkpoint", RUN, "--body-mb", "20", "--clients", "2", "--slow-seconds", "3"],
    "serving/translate_cli.py": ["--checkpoint", RUN, "--limit", "50", "--sizes", "20,50", "--rounds", "1"]
    + ["--searches", "greedy"],
    "decoding/hf_decode.py": ["--rounds", "1", "--import-rounds", "1"],
    "quality/decode_levers.py": [
        "--checkpoint",
        RUN,
        "--beams",
        "1,4",
        "--length-penalties",
        "0.6,1.0",
        "--limit",
        "50",
    ],
    "decoding/constraints.py": ["--checkpoint", RUN, "--limit", "50", "--rounds", "1"],
    "data/data_scale.py": ["--sizes", "10000,20000", "--rounds", "1", "--loader-batches", "20", "--train-steps", "4"]
    + ["--process-steps", "4"],
    "quality/time_to_quality.py": ["--budget", "20", "--points", "10,20", "--valid-limit", "100"],
    "quality/positions.py": [
        "--budget",
        "5",
        "--limit",
        "50",
        "--num-examples",
        "3000",
        "--schemes",
        "sinusoidal",
        "rope:1",
    ],
    "quality/vit_digits.py": ["--quick"],
    "data/prepared_check.py": ["--sizes", "20000", "--repeats", "1"],
    "quality/decoder_only.py": ["--budget", "10", "--points", "5,10", "--num-examples", "3000", "--valid-limit", "50"]
    + ["--rounds", "1"],
}
NOT_PLANNED = {"baselines", "gpu"}  # the baselines the scripts import, and the GPU's scripts (gpu/gpu.sh runs them)
BUDGET_S = 570.0  # leaves a margin under 10 minutes for interpreter start-up and the tee
PER_SCRIPT_MAX_S = 330.0


def discover() -> list[tuple[str, list[str]]]:
    """The planned scripts (`subject/name.py`), in plan order. Raises if a script in a subject folder of
    benchmarks/ has no plan (or a plan names a missing script), so `make bench` never runs a script with
    guessed flags."""
    present = {p.relative_to(HERE).as_posix() for p in HERE.glob("*/*.py") if p.parent.name not in NOT_PLANNED}
    unplanned, missing = sorted(present - PLAN.keys()), sorted(PLAN.keys() - present)
    if unplanned or missing:
        raise SystemExit(
            f"benchmarks/run_all.py PLAN is out of date: no plan for {unplanned}, no script for {missing}; "
            "add each new script to PLAN with arguments that fit the budget"
        )
    return list(PLAN.items())


def train_tiny_run(env: dict, folder: Path) -> Path:
    """The tiny run the checkpoint-taking benchmarks measure (their real figures use a preset's run)."""
    run = folder / "run"
    subprocess.run(
        [sys.executable, "-m", "attnlab", "train", "--model", "transformer", "--preset", "tiny", "--out", str(run)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return run


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop the script and everything it started (a killed script cannot stop its own servers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(proc.pid, signal.SIGKILL)


def environment() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", ATTNLAB_RESULTS=str(SMOKE_RECORDS))
    if not env.get("ATTNLAB_DATA"):
        default = ROOT.parent / "shared" / "data" / "fra-eng.zip"
        if default.exists():
            env["ATTNLAB_DATA"] = str(default)
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these scripts (name, name.py or subject/name.py)"
    )
    ap.add_argument("--list", action="store_true", help="print the plan and exit")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole run")
    args = ap.parse_args(argv)
    jobs = discover()
    if args.only:
        wanted = {n if n.endswith(".py") else n + ".py" for n in args.only}
        known = {name for name, _ in jobs} | {Path(name).name for name, _ in jobs}
        unknown = wanted - known
        if unknown:
            raise SystemExit(f"no benchmark named {sorted(unknown)}; present: {[name for name, _ in jobs]}")
        jobs = [(name, a) for name, a in jobs if name in wanted or Path(name).name in wanted]
    if args.list:
        for name, a in jobs:
            print(" ".join(["python", f"benchmarks/{name}", *a]))
        return 0
    tmp = tempfile.TemporaryDirectory(prefix="attnlab-bench-")
    needs_run = any(RUN in a for _, a in jobs)

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    env = environment()
    start = time.monotonic()
    failures, skipped = [], []
    with open(RESULTS, "w") as log:

        def emit(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()
            log.write(text)

        emit(
            f"# make bench: {time.strftime('%Y-%m-%d %H:%M:%S')}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f}\n"
        )
        run = train_tiny_run(env, Path(tmp.name)) if needs_run else None
        if run is not None:
            emit(f"(a tiny Transformer run for the scripts that take --checkpoint: {run})\n")
        for name, script_args in jobs:
            script_args = [str(run) if a == RUN else a for a in script_args]
            left = args.budget - (time.monotonic() - start)
            command = " ".join(["python", f"benchmarks/{name}", *script_args])
            if left < 20:
                emit(f"\n## {command}\nskipped: the {args.budget:.0f} s budget is spent (run it with --only)\n")
                skipped.append(name)
                continue
            timeout = min(left, PER_SCRIPT_MAX_S)
            emit(f"\n## {command}\n\n")
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, str(HERE / name), *script_args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: the servers or workers it started end with it
            )
            # A watchdog, not a read timeout: a script that hangs silently must be stopped too.
            watchdog = threading.Timer(timeout, _kill_group, (proc,))
            watchdog.start()
            # Once the script exits, what it left running (a killed script's servers) must not hold the pipe.
            threading.Thread(target=lambda p=proc: (p.wait(), _kill_group(p)), daemon=True).start()
            for line in proc.stdout:  # stream, so a slow script shows progress
                emit(line)
            proc.wait()
            watchdog.cancel()
            _kill_group(proc)
            seconds = time.monotonic() - t0
            if proc.returncode != 0:
                why = (
                    f"killed after {seconds:.0f} s (limit {timeout:.0f} s)"
                    if proc.returncode < 0
                    else f"exit code {proc.returncode}"
                )
                emit(f"\n{name}: FAILED ({why})\n")
                failures.append(name)
            else:
                emit(f"\n({name}: {seconds:.0f} s)\n")
        total = time.monotonic() - start
        emit(
            f"\n# {len(jobs) - len(failures) - len(skipped)}/{len(jobs)} benchmarks finished in {total:.0f} s"
            + (f"; failed: {', '.join(failures)}" if failures else "")
            + (f"; not reached in the budget: {', '.join(skipped)}" if skipped else "")
            + "\n"
        )
    tmp.cleanup()
    print(f"(written to {RESULTS.relative_to(ROOT)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
