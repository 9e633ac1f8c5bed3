"""Type and range checks for the config dataclasses, so a hand-edited config.json or a `--set` with a
wrong value fails in one line naming the field, not deep inside PyTorch.

    check_field_types(TrainConfig(lr="x"))  ->  ValueError: TrainConfig.lr must be a number (float), got 'x'
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


def check_range(
    owner: str,
    name: str,
    value,
    lo=None,
    hi=None,
    *,
    none_ok: bool = False,
    hi_open: bool = False,
    lo_open: bool = False,
) -> None:
    """Raise ValueError unless lo <= value <= hi (bounds optional, open where asked), saying the range."""
    if value is None and none_ok:
        return
    bad = value is None or isinstance(value, bool) or not isinstance(value, (int, float))
    if not bad:
        bad = (
            (isinstance(value, float) and not math.isfinite(value))
            or (lo is not None and (value <= lo if lo_open else value < lo))
            or (hi is not None and (value >= hi if hi_open else value > hi))
        )
    if bad:
        left = "" if lo is None else f"{'>' if lo_open else '>='} {lo}"
        right = "" if hi is None else f"{'<' if hi_open else '<='} {hi}"
        allowed = "a finite number " + " and ".join(x for x in (left, right) if x)
        tail = " (or null for none)" if none_ok else ""
        raise ValueError(f"{owner}.{name} must be {allowed}{tail}, got {value!r}")


def check_positive_int(name: str, value, note: str = "") -> int:
    """`value` as an int >= 1 (bools refused), or ValueError "NAME must be an integer >= 1NOTE, got VALUE"."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1{note}, got {value!r}")
    return value
