"""Range checks for command-line numbers: one message shape for every flag of every command.

    check_int("--epochs", args.epochs, 1, 10_000)    # ValueError: --epochs must be in 1..10000, got 0
    check_int("--workers", args.workers, 1)           # ValueError: --workers must be at least 1, got 0
    check_float("--lr", args.lr, low=0, low_open=True) # refuses nan and inf, which compare False to all

Upper bounds exist to refuse values that would only allocate memory for minutes (issue 12, item 9).
"""

from __future__ import annotations

import math

SEED_MAX = 2**32 - 1  # numpy's and most tools' seed range; torch accepts it too


def check_int(flag: str, value: int, low: int, high: int | None = None, why: str = "") -> int:
    """`value` within [low, high] or a ValueError naming the flag, the range and what came."""
    if value < low or (high is not None and value > high):
        allowed = f"in {low}..{high}" if high is not None else f"at least {low}"
        raise ValueError(f"{flag} must be {allowed}{why}, got {value}")
    return value


def check_float(
    flag: str, value: float, low: float | None = None, high: float | None = None, low_open: bool = False
) -> float:
    """A finite float within the bounds (`low_open`: strictly above `low`)."""
    ok = math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        lo = "" if low is None else (f"> {low:g}" if low_open else f">= {low:g}")
        hi = "" if high is None else f"<= {high:g}"
        allowed = " and ".join(x for x in (lo, hi) if x) or "finite"
        raise ValueError(f"{flag} must be a finite number {allowed}, got {value}")
    return value


def check_seed(value: int, flag: str = "--seed") -> int:
    return check_int(flag, value, 0, SEED_MAX)
