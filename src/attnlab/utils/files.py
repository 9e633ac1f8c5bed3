"""Atomic file writes: a temp file beside the target, renamed over it only when complete, so a crash
or Ctrl-C never leaves half a file (a report, a figure, a checkpoint, a download) where readers look."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp"):
    """Yield a temp path beside `path`; on a clean exit rename it to `path`, otherwise delete it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; these files are meant to be read by others
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp folder beside `path`; on a clean exit it becomes `path` (a folder already there is
    swapped out, then deleted), otherwise it is deleted. Readers see the old folder or the new one, never
    half of one (a checkpoint, an export, a prepared corpus)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


# --------------------------------------------------------------------------- JSON
def write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from exc


def json_safe(obj: Any) -> Any:
    """NaN and infinities as null: JSON has no such numbers (json.dumps would write a bare NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def append_jsonl(path: str | os.PathLike, obj: dict) -> None:
    """Append one event; a single short write per line keeps lines whole even if killed.
    Non-finite numbers are written as null, so every line stays valid JSON."""
    line = json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def read_json_object(path: str | os.PathLike, what: str = "vocabulary") -> dict:
    """The JSON object in `path` (a `what` file): a missing file, bad JSON or another JSON type is one
    clear error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} does not exist")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); re-save the {what}") from exc
    if not isinstance(obj, dict):
        got = "null" if obj is None else f"a JSON {_JSON_NAMES.get(type(obj), type(obj).__name__)}"
        raise ValueError(f"{path} should hold a JSON object ({what}), it holds {got}; restore or re-save the {what}")
    return obj


_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
