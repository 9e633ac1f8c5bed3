"""Run every benchmark script in sequence at sizes that fit 10 minutes on 2 CPU cores (`make bench`).

Each script prints its own ratios against its named baselines, with the command that made them; this
runner prints each command before its output and tees everything to benchmarks/results/latest.txt
(not committed: results worth keeping are copied into BENCHMARKS.md with their commands).

    python benchmarks/run_all.py                 # all of them, ~10 minutes at most
    python benchmarks/run_all.py --only train_throughput attention
    python benchmarks/run_all.py --list          # what would run, with which arguments
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "latest.txt"

# script -> arguments sized for the 10-minute budget (the full runs are in each script's docstring).
PLAN: dict[str, list[str]] = {
    "attention.py": [],  # ~4 min: L to 4096, memory to L = 16,384
    "train_throughput.py": ["--steps", "5", "--warmup", "1"],  # full model sizes, fewer rounds
    "decode.py": ["--repeats", "2"],
    "data.py": [],
    "serve_load.py": ["--clients", "32", "--requests", "10"],  # the load: 32 clients x 10 requests
}
SKIP = {"run_all.py", "common.py", "gpu_kernels.py"}  # helpers, and GPU-only scripts (see gpu.sh)
BUDGET_S = 570.0  # leaves a margin under 10 minutes for interpreter start-up and the tee
PER_SCRIPT_MAX_S = 330.0


def discover() -> list[tuple[str, list[str]]]:
    """The planned scripts that exist, in plan order, then any other benchmarks/*.py (with --quick if
    its --help offers it)."""
    present = sorted(p.name for p in HERE.glob("*.py") if p.name not in SKIP and not p.name.startswith("gpu_"))
    jobs = [(name, args) for name, args in PLAN.items() if name in present]
    for name in present:
        if name not in PLAN:
            help_text = subprocess.run(
                [sys.executable, str(HERE / name), "--help"], capture_output=True, text=True, timeout=60
            ).stdout
            jobs.append((name, ["--quick"] if "--quick" in help_text else []))
    return jobs


def environment() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not env.get("ATTNLAB_DATA"):
        default = ROOT.parent / "shared" / "data" / "fra-eng.zip"
        if default.exists():
            env["ATTNLAB_DATA"] = str(default)
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these scripts (with or without .py)")
    ap.add_argument("--list", action="store_true", help="print the plan and exit")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole run")
    args = ap.parse_args(argv)
    jobs = discover()
    if args.only:
        wanted = {n if n.endswith(".py") else n + ".py" for n in args.only}
        unknown = wanted - {name for name, _ in jobs}
        if unknown:
            raise SystemExit(f"no benchmark named {sorted(unknown)}; present: {[name for name, _ in jobs]}")
        jobs = [(name, a) for name, a in jobs if name in wanted]
    if args.list:
        for name, a in jobs:
            print(" ".join(["python", f"benchmarks/{name}", *a]))
        return 0

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    env = environment()
    start = time.monotonic()
    failures = []
    with open(RESULTS, "w") as log:

        def emit(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()
            log.write(text)

        emit(
            f"# make bench: {time.strftime('%Y-%m-%d %H:%M:%S')}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f}\n"
        )
        for name, script_args in jobs:
            left = args.budget - (time.monotonic() - start)
            command = " ".join(["python", f"benchmarks/{name}", *script_args])
            if left < 20:
                emit(f"\n## {command}\nskipped: the {args.budget:.0f} s budget is spent\n")
                failures.append(f"{name} (skipped)")
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
            )
            # A watchdog, not a read timeout: a script that hangs silently must be stopped too.
            watchdog = threading.Timer(timeout, proc.kill)
            watchdog.start()
            for line in proc.stdout:  # stream, so a slow script shows progress
                emit(line)
            proc.wait()
            watchdog.cancel()
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
            f"\n# {len(jobs) - len(failures)}/{len(jobs)} benchmarks finished in {total:.0f} s"
            + (f"; failed or skipped: {', '.join(failures)}" if failures else "")
            + "\n"
        )
    print(f"(written to {RESULTS.relative_to(ROOT)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
