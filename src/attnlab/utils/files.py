"""Atomic file writes: a temp file beside the target, renamed over it only when complete, so a crash
or Ctrl-C never leaves half a file (a report, a figure, a checkpoint, a download) where readers look."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

# Temp names carry the writer's pid and host, so a later writer can tell a dead process's leftovers
# from a live one's: `.NAME.tmp-PID-HOST-RANDOM` (HOST: 8 hex digits of the host name's hash).
_TEMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-(?P<host>[0-9a-f]{8})-[0-9a-f]{8}")


def _host_tag() -> str:
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def _temp_name(name: str) -> str:
    return f".{name}.tmp-{os.getpid()}-{_host_tag()}-{secrets.token_hex(4)}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def clean_stale_temps(parent: str | os.PathLike[str]) -> list[Path]:
    """Remove the temp folders and files `atomic_dir`/`atomic_path` left in `parent` when their writer
    was killed: only those of processes of this host that no longer exist (a live writer's, another
    host's or a name without a pid are kept). Returns what was removed."""
    if os.name != "posix":  # os.kill(pid, 0) would terminate the process on Windows
        return []
    removed, host = [], _host_tag()
    try:
        entries = list(os.scandir(os.fspath(parent)))
    except OSError:
        return []
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m is None or m["host"] != host or int(m["pid"]) == os.getpid() or _pid_alive(int(m["pid"])):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with suppress(FileNotFoundError):
                os.unlink(entry.path)
        removed.append(Path(entry.path))
    return removed


def _create_unique(parent: Path, name: str, suffix: str, make) -> Path:
    """`make(path)` on a fresh temp name beside `name` (retried on the rare name clash)."""
    while True:
        tmp = parent / (_temp_name(name) + suffix)
        try:
            make(tmp)
        except FileExistsError:
            continue
        return tmp


def make_temp_dir(path: str | os.PathLike) -> Path:
    """A new empty folder beside `path` under a temp name (removed by `clean_stale_temps` if its writer
    dies), with the mode a plain mkdir would give (0777 less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _create_unique(path.parent, path.name, "", lambda p: os.mkdir(p, 0o777))


def make_temp_file(path: str | os.PathLike, suffix: str = ".tmp") -> Path:
    """A new empty file beside `path` under a temp name, with the mode a plain open(path, "w") would give."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _create_unique(
        path.parent, path.name, suffix, lambda p: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    )


def _umask() -> int:
    mask = os.umask(0o022)  # read it the only way POSIX offers: set, then put back
    os.umask(mask)
    return mask


def aside_name(path: Path) -> Path:
    """A hidden name beside `path` to move it to just before it is replaced. Never removed by
    `clean_stale_temps`: if the writer dies between the two renames, the earlier output waits there."""
    return path.with_name(f".{path.name}.old-{os.getpid()}-{secrets.token_hex(4)}")


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp"):
    """Yield a temp path beside `path`; on a clean exit rename it to `path`, otherwise delete it.
    The file gets the mode a plain `open(path, "w")` would give (0666 less the umask)."""
    path = Path(path)
    tmp = make_temp_file(path, suffix)
    try:
        yield str(tmp)
        # writers that replace the file (safetensors' save_file makes it anew, 0600) keep the open() mode
        with suppress(FileNotFoundError):
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fresh_temp_dir(path: Path) -> Path:
    """A new temp folder beside `path` (`make_temp_dir`), after removing what killed writers left there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(path.parent)
    return make_temp_dir(path)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp folder beside `path`; on a clean exit it becomes `path` (a folder already there is
    swapped out, then deleted), otherwise it is deleted. Readers see the old folder or the new one, never
    half of one (a checkpoint, an export, a prepared corpus). The folder gets the mode a plain mkdir
    would give (0777 less the umask); temp folders of killed writers beside it are removed first."""
    path = Path(path)
    tmp = fresh_temp_dir(path)
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


# --------------------------------------------------------------------------- new output files
def is_device(path: str | os.PathLike) -> bool:
    """Whether `path` is a character device (/dev/null, /dev/stdout, a terminal): written to, never created."""
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def check_new_file(path: str, flag: str = "--out", command: str = "attnlab translate") -> None:
    """`flag` must name a new file in a folder that exists, or a device such as /dev/null: one line
    otherwise, before any work. Nothing already there is ever replaced."""
    if not path:
        raise ValueError(f"{flag} needs a file name, got an empty one; give a new file's path (or leave {flag} out)")
    if is_device(path):
        return
    p = Path(path)
    if p.is_symlink() or p.exists():
        what = "a symlink" if p.is_symlink() else "a folder" if p.is_dir() else "a file"
        raise FileExistsError(
            f"{flag} {path} is {what} already there; {command} writes a new file only: choose a new name"
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"{flag} {path}: the folder {parent} does not exist; create it or choose another path")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"{flag} {path}: cannot write in {parent}; choose a folder you can write to")


# --------------------------------------------------------------------------- JSON
def write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


MAX_JSON_BYTES = 512 * 2**20  # the largest run or model JSON file read (a big tokenizer's is tens of MB)
MAX_JSON_DEPTH = 32  # the deepest nesting of arrays and objects read (attnlab's own files nest 4 deep)


def loads_json(data: str | bytes, where: str | os.PathLike, what: str = "file") -> Any:
    """`data` (the text of `where`, a `what`) parsed as JSON, with the nesting bounded: bad UTF-8, bad
    JSON and nesting past MAX_JSON_DEPTH are each one ValueError naming `where`, never a traceback
    (Python's parser raises RecursionError a thousand levels deep).

    Examples:
        >>> loads_json('{"a": [1, 2]}', "x.json")
        {'a': [1, 2]}
        >>> loads_json("[" * 5000 + "]" * 5000, "x.json")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: x.json nests arrays or objects more than 32 deep; ...
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        obj = json.loads(text)
        deep = _depth(obj) > MAX_JSON_DEPTH
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start}); restore or re-save the {what}"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON ({exc}); restore or re-save the {what}") from None
    except RecursionError:
        deep = True
    if deep:
        raise ValueError(
            f"{where} nests arrays or objects more than {MAX_JSON_DEPTH} deep; it is not a file attnlab wrote: "
            "restore or re-save it"
        )
    return obj


def _depth(obj: Any) -> int:
    """The nesting depth of a parsed JSON value (a scalar: 0), without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            deepest = max(deepest, d)
            if deepest > MAX_JSON_DEPTH:
                break
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """The JSON in `path`, read through `loads_json`: a missing file, a folder or a dangling link, a file
    over MAX_JSON_BYTES, bad UTF-8, bad JSON or deep nesting is one line naming the file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a {what}; remove or rename it")
    if not path.is_file():
        dangling = " (a link to nothing)" if path.is_symlink() else ""
        raise FileNotFoundError(f"{path} is missing{dangling}")
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise ValueError(
                f"{path} has {size:,} bytes, more than the {MAX_JSON_BYTES // 2**20} MB a {what} may take; "
                "restore or re-save it"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path} cannot be read ({exc.strerror or exc})") from None
    return loads_json(data, path, what)


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
    if path.is_dir():
        inside = path / "config.json" if what == "config" else None
        hint = f"; pass {inside}" if inside is not None and inside.is_file() else f"; pass the {what} file itself"
        raise ValueError(f"{what} file {path} is a folder{hint}")
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} does not exist")
    obj = read_json(path, what)
    if not isinstance(obj, dict):
        got = "null" if obj is None else f"a JSON {_JSON_NAMES.get(type(obj), type(obj).__name__)}"
        raise ValueError(f"{path} should hold a JSON object ({what}), it holds {got}; restore or re-save the {what}")
    return obj


_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
