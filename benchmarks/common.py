"""Helpers shared by the benchmarks: medians of repeated runs, tables, the decoding benchmarks' flags."""

import math
import statistics
import time


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


def table(headers, rows) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


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
