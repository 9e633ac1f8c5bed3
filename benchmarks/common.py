"""Helpers shared by the benchmarks: medians of repeated runs, tables, the decoding benchmarks' flags, and
the one JSON record each script writes (`write_result`), which BENCHMARKS.md is rendered from.

Every table a script prints through `table()` is also kept, so that `write_result()` at the end of `main`
saves it as data: `figures` holds the last table's rows (one dict per row, the headers as keys), `tables`
the earlier ones. The record lands in benchmarks/results/<script>.json, or under `$ATTNLAB_RESULTS` (the
smoke tests and `make bench` point it at a scratch folder, so they never replace the measured page).
`python tools/render_benchmarks.py` then rewrites BENCHMARKS.md from benchmarks/results/*.json.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from attnlab.inference.precision import cpu_features as all_cpu_features
from attnlab.inference.precision import native_bf16, resolve_precision

RESULTS_ENV = "ATTNLAB_RESULTS"
BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
# The features that decide which kernels a figure ran on: vector width, int8 and bf16 dot products, AMX.
WATCHED = ("avx2", "avx512", "avx_vnni", "amx", "fma")
_TABLES: list[dict] = []


def median_time(fn, repeats: int = 3, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_call(fn, reps: int, *args) -> float:
    """Seconds per call of fn(*args), over `reps` calls back to back."""
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    return (time.perf_counter() - t0) / reps


def table(headers, rows, caption: str | None = None, formats: dict | None = None, file_only: bool = False) -> str:
    """`rows` as a Markdown table under `headers`; also kept for `write_result` (with its caption).

    `formats` maps a column to the format that prints its numbers with their unit (`{"vs fp32": "{:.2f}×"}`):
    the record keeps the numbers and the formats, which BENCHMARKS.md prints the same way. `file_only`: the
    table stays in the record, named on the page by one line."""
    headers, rows = [str(h) for h in headers], [list(r) for r in rows]
    kept = {"caption": caption, "figures": [dict(zip(headers, map(_cell, r))) for r in rows]}
    _TABLES.append({**kept, **({"formats": formats} if formats else {}), **({"file_only": True} if file_only else {})})
    for column, fmt in (formats or {}).items():  # printed as the page prints them
        i = headers.index(column)
        rows = [[fmt.format(c) if j == i and isinstance(c, (int, float)) else c for j, c in enumerate(r)] for r in rows]
    widths = [max(len(h), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def _cell(value):
    """A table cell as JSON keeps it: numbers stay numbers (finite ones), anything else its text."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


def cpu_features() -> list[str]:
    """The CPU features that matter to the figures (AVX2, AVX-512*, VNNI, BF16, AMX), sorted."""
    return sorted(f for f in all_cpu_features() if f.startswith(WATCHED))


def print_machine() -> list[str]:
    """Print (and return) the CPU features found, torch's version and the load: a figure's context."""
    features = cpu_features()
    print(
        f"CPU features: {' '.join(features) or 'none of ' + '/'.join(WATCHED)}; torch {torch.__version__}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return features


def script_path(script: str) -> str:
    """A script's path from the repository root, as a command names it (`benchmarks/decoding/decode.py` for
    its `__file__`); a path outside the checkout stays as given."""
    path = Path(script).resolve()
    if path.is_relative_to(BENCHMARKS.parent):
        return path.relative_to(BENCHMARKS.parent).as_posix()
    return script


def header(argv) -> None:
    """Print the command and the machine a CPU precision figure depends on: threads, load, the CPU's vector
    features and whether bf16 runs natively (what `--precision auto` picks)."""
    shown = sorted(f for f in all_cpu_features() if f.startswith(("avx", "amx", "fma", "sse4_2", "f16c")))
    ok, why = native_bf16("cpu")
    print(f"command: python {script_path(sys.argv[0])} {shlex.join(argv)}".rstrip())
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, uptime load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
    )
    print(f"CPU features: {' '.join(shown)}")
    print(f"native bf16: {ok} ({why}); `auto` picks {resolve_precision('auto', 'cpu').picked}")


def results_dir() -> Path:
    """Where records go: `$ATTNLAB_RESULTS` if set, else benchmarks/results/."""
    return Path(os.environ[RESULTS_ENV]) if os.environ.get(RESULTS_ENV) else RESULTS


def write_result(script: str, argv=None, figures=None, main: int = -1, stem: str | None = None, **extra) -> Path:
    """Write this run's record to results_dir()/<script stem>.json (or <stem>.json: a script that writes
    more than one record) and return its path.

    `script` is the script's path or name (pass `__file__`); `argv` its arguments (default sys.argv[1:]);
    `figures` the rows of its main table (default: table number `main` of those printed through `table()`,
    the last unless said, the others going to `tables`); `extra` any other keys the page needs (`baseline`,
    `notes`, `summary`, ...)."""
    name = Path(script).name
    path = script_path(script)
    argv = sys.argv[1:] if argv is None else list(argv)
    kept = list(_TABLES)
    if figures is None and kept:
        first = kept.pop(main)
        figures = first["figures"]
        if "formats" in first:
            extra = {"formats": first["formats"], **extra}
    figures = figures or []
    record = {
        "command": " ".join(["python", path, shlex.join(argv)]).rstrip(),
        "cpu_features": print_machine(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "figures": [{str(k): _cell(v) for k, v in row.items()} for row in figures],
        **({"tables": kept} if kept else {}),
        **extra,
    }
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{stem or Path(name).stem}.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(out)  # atomic: a killed run never leaves half a record
    print(f"result: {out}", flush=True)
    return out


def add_decoding_args(ap, checkpoint_help: str = "run folder") -> None:
    """--checkpoint, --split, --limit, --rounds, --threads: what every decoding benchmark is run on."""
    ap.add_argument("--checkpoint", required=True, help=checkpoint_help)
    ap.add_argument("--split", default="test", choices=["valid", "test"])
    ap.add_argument("--limit", type=int, help="first N sentences of the split")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)


def budget_points(ap, args) -> None:
    """Check --budget (seconds of training) and turn --points ("s,s,...", default 6 points over the budget)
    into args.points, a list of seconds: what every time-to-quality benchmark scores along the way."""
    if not (args.budget > 0 and math.isfinite(args.budget)):
        ap.error(f"--budget must be a positive number of seconds, got {args.budget}")
    default = [args.budget * f for f in (0.1, 0.2, 0.4, 0.6, 0.8, 1.0)]
    args.points = [float(p) for p in args.points.split(",")] if args.points else default
