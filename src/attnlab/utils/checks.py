"""Type and range checks with one message shape, for command-line flags, config fields and arguments,
so a bad value fails in one line naming it, not deep inside PyTorch.

    check_range("--epochs", 0, 1, 10_000, integer=True)   # --epochs must be an integer >= 1 and <= 10000, got 0
    check_range("TrainConfig.lr", float("nan"), 0, lo_open=True)   # TrainConfig.lr must be a finite number > 0, got nan
    check_field_types(TrainConfig(lr="x"))   # TrainConfig.lr must be a number (float), got 'x'

Upper bounds exist to refuse values that would only allocate memory for minutes.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def _accepts(hint, value) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(h, value) for h in typing.get_args(hint))
    if origin is tuple:
        args = typing.get_args(hint)
        return (
            isinstance(value, (tuple, list))
            and len(value) == len(args)
            and all(_accepts(h, v) for h, v in zip(args, value))
        )
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # JSON writes 1.0 as 1: an integer is a fine float
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is type(None):
        return value is None
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint we do not check (Any, callables)


def _describe(hint) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(h) for h in typing.get_args(hint))
    if origin is tuple:
        return f"a list of {len(typing.get_args(hint))} numbers"
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def check_field_types(obj, values: Mapping[str, Any] | None = None) -> None:
    """Raise ValueError naming the first field whose value has the wrong type.

    `obj` is a dataclass instance, or a dataclass type with `values` (checked before construction,
    so `__post_init__` never compares a string with a number).
    """
    cls = obj if isinstance(obj, type) else type(obj)
    values = values if values is not None else {f.name: getattr(obj, f.name) for f in fields(obj)}
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if name in hints and not _accepts(hints[name], value):
            raise ValueError(f"{cls.__name__}.{name} must be {_describe(hints[name])}, got {value!r}")


SEED_MAX = 2**32 - 1  # numpy's and most tools' seed range; torch accepts it too


def check_range(
    name: str,
    value,
    lo=None,
    hi=None,
    *,
    integer: bool = False,
    none_ok: bool = False,
    lo_open: bool = False,
    hi_open: bool = False,
    why: str = "",
):
    """`value` unchanged if it is a finite number (an int if `integer`; bools refused) within the bounds
    (`lo_open`/`hi_open`: strictly), or None with `none_ok`; else a ValueError saying what was allowed."""
    if value is None and none_ok:
        return value
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if ok:
        ok = (
            math.isfinite(value)
            and not (lo is not None and (value <= lo if lo_open else value < lo))
            and not (hi is not None and (value >= hi if hi_open else value > hi))
        )
    if not ok:
        left = "" if lo is None else f"{'>' if lo_open else '>='} {lo}"
        right = "" if hi is None else f"{'<' if hi_open else '<='} {hi}"
        bounds = " and ".join(x for x in (left, right) if x)
        kind = "an integer" if integer else "a finite number"
        tail = " (or null for none)" if none_ok and not name.startswith("--") else ""
        raise ValueError(f"{name} must be {kind}{' ' + bounds if bounds else ''}{why}{tail}, got {value!r}")
    return value


def check_seed(value: int, flag: str = "--seed") -> int:
    return check_range(flag, value, 0, SEED_MAX, integer=True)


def all_empty_warning(total: int, empty: int, what: str = "translation") -> str | None:
    """A one-line warning when all `total` outputs of a decode (one or more) are `empty`: the model ended
    every sentence with <eos> at once, as damaged or untrained weights do; None otherwise.

    Examples:
        >>> print(all_empty_warning(2, 2))  # doctest: +ELLIPSIS
        warning: every translation is empty (the model emitted <eos> first for all 2 sentences); ...
        >>> all_empty_warning(2, 1) is None
        True
    """
    if total < 1 or empty < total:
        return None
    return (
        f"warning: every {what} is empty (the model emitted <eos> first for all {total} sentences); "
        "its weights may be damaged or untrained"
    )
