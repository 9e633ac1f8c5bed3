"""One guard for everything attnlab writes: an output is new, an earlier output of the same kind, or refused.

Every command that writes names its output's kind and calls `claim_output` before any work:

    claim = claim_output(args.out, "heads", force=args.force)   # refuses here, before minutes of work
    with write_output(claim) as tmp:                            # a temp folder beside the target
        ...write into tmp...
    # renamed into place; checked again at the rename, so a rival writer is never silently replaced

An earlier output is recognised by its marker (`attnlab-output.json`: kind, version, an id, the entries it
wrote). `--force` replaces an output of the same kind only, and only when the folder holds nothing but what
attnlab wrote there; a user's folder, another kind of output, or a folder holding the source being read is
refused whatever the flags. Runs are written in place (checkpoints appear as training goes): `claim_output`
with `in_place=True` prepares the folder instead of a temp one. Single files (averaged weights) carry
their kind in the safetensors metadata and are written with `write_output_file`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError, safe_open

from attnlab import __version__
from attnlab.runs.layout import CONFIG_FILE, MARKER_FILE, RUN_ENTRIES
from attnlab.runs.weights import CONFIG_METADATA
from attnlab.utils.files import aside_name, fresh_temp_dir, make_temp_file, read_json

KINDS = {
    "run": "an attnlab run",
    "prepared": "a prepared corpus",
    "export-hf": "a Hugging Face export",
    "export-ctranslate2": "a CTranslate2 export",
    "export-onnx": "an ONNX export",
    "export-web": "a static explorer page",
    "demo": "an attnlab demo",
    "heads": "a head analysis",
    "attention": "attention figures",
    "figures": "chapter figures",
    "averaged": "averaged weights",
    "tensorboard": "TensorBoard event files",
    "weights": "a run's weights",  # model.safetensors and checkpoints: written by training, never replaced
}
OUTPUT_METADATA = "attnlab_output"  # safetensors metadata key: the kind of an attnlab weights file


@dataclass(frozen=True)
class Claim:
    """What `claim_output` found and decided: write `path` (new) or replace the earlier output there."""

    path: Path
    kind: str
    replace: bool = False  # an earlier output of the same kind is there and --force was given
    token: str | None = None  # the earlier output's marker id, checked again at the final rename
    flag: str = "--out"
    keep: bool = False  # an earlier output continued in place (a resumed run's TensorBoard folder)


def describe(kind: str) -> str:
    return KINDS[kind]


def read_marker(folder: str | os.PathLike) -> dict | None:
    """The marker of the attnlab output in `folder`, or None when there is none (or it is unreadable)."""
    path = Path(folder) / MARKER_FILE
    try:
        marker = read_json(path, "marker")
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("kind") in KINDS else None


def output_kind(path: str | os.PathLike) -> str | None:
    """The kind of attnlab output at `path` (see KINDS), or None for anything else."""
    path = Path(path)
    if path.is_file():
        return _file_kind(path)
    if not path.is_dir():
        return None
    marker = read_marker(path)
    if marker is not None:
        return marker["kind"]
    if _looks_like_run(path):
        return "run"
    return None


def _looks_like_run(path: Path) -> bool:
    """A run folder without a marker (from an attnlab that wrote none): its config.json is a run config."""
    try:
        cfg = read_json(path / CONFIG_FILE, "config")
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and isinstance(cfg.get("model_type"), str) and isinstance(cfg.get("model"), dict)


def _file_kind(path: Path) -> str | None:
    if path.suffix != ".safetensors":
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
    except (OSError, SafetensorError):  # a damaged or foreign file is simply not ours
        return None
    if meta.get(OUTPUT_METADATA) in KINDS:
        return meta[OUTPUT_METADATA]
    if "averaged" in meta:
        return "averaged"
    return "weights" if CONFIG_METADATA in meta else None


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def _inside(child: Path, parent: Path) -> bool:
    child, parent = child.resolve(), parent.resolve()
    return child == parent or parent in child.parents


def _through_link(path: Path, flag: str) -> Path:
    """The path a writer works at: a symlink's target (so a replacement lands where the link points and
    the link stays), or one line for a link to nothing (it would end as a failed rename after the work)."""
    if not path.is_symlink():
        return path
    if not path.exists():
        raise ValueError(
            f"{flag} {path} is a symlink to {os.readlink(path)}, which does not exist; create what it points "
            f"to, or pass {flag} a path that is not a dangling link"
        )
    return path.resolve()


def _check_writable(path: Path, flag: str) -> None:
    existing = path
    while not existing.exists():  # the nearest folder that exists is where ours would be created
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {path} lies under {existing}, which is a file; choose a folder elsewhere")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise ValueError(
            f"{flag} {path}: cannot write in {existing} ({exc.strerror}); choose a folder you can write to"
        ) from exc


def claim_output(
    path: str | os.PathLike,
    kind: str,
    *,
    force: bool = False,
    sources: Iterable[str | os.PathLike] = (),
    flag: str = "--out",
    hint: str = "",
) -> Claim:
    """Decide, before any work, whether `kind` may be written at the folder `path`.

    New (absent or empty): allowed. An earlier output of the same kind: allowed with `force`, if it holds
    only what attnlab wrote and none of `sources` (the files the command reads). Anything else: ValueError,
    one line saying what is there and what to do. `hint` is appended to a same-kind refusal (e.g. --resume).
    """
    if kind not in KINDS:
        raise KeyError(kind)
    path = _through_link(Path(path), flag)
    what = describe(kind)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file; pass a folder (a new one, or {what} to replace with --force)")
    _check_writable(path, flag)
    if not path.is_dir() or not any(path.iterdir()):
        return Claim(path, kind, flag=flag)
    found = output_kind(path)
    if found is None:
        raise ValueError(
            f"{flag} {path} is not empty and holds no attnlab output; attnlab never writes into it. "
            f"Choose a new folder for {flag}"
        )
    if found != kind:
        raise ValueError(
            f"{flag} {path} holds {describe(found)}, not {what}; choose another {flag} (--force replaces only {what})"
        )
    if not force:
        raise ValueError(f"{path} already holds {what}{hint}; pass --force to replace it, or choose another {flag}")
    for source in sources:
        if Path(source).exists() and _inside(Path(source), path):
            raise ValueError(
                f"{flag} {path} holds {source}, which this command reads; choose another {flag} (--force never "
                f"replaces its own input)"
            )
    marker = read_marker(path) or {}
    # a run also gains files after it was written (alignment.json, from `attnlab heads`)
    expected = set(marker.get("entries") or ()) | (RUN_ENTRIES if kind == "run" else set()) | {MARKER_FILE}
    if kind == "tensorboard":  # written in place as training goes, one event file per training process
        expected |= {name for name in _entries(path) if name.startswith("events.out.tfevents.")}
    if kind == "run":  # its TensorBoard folder where attnlab's own message suggests it (RUN/tb)
        expected |= {name for name in _entries(path) if (read_marker(path / name) or {}).get("kind") == "tensorboard"}
    extra = sorted(_entries(path) - expected)
    if extra:
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        raise ValueError(
            f"{path} holds {what} and also {shown}, which attnlab did not write there; move them out "
            f"or choose another {flag} (--force replaces only what attnlab wrote)"
        )
    return Claim(path, kind, replace=True, token=marker.get("id"), flag=flag)


def _marker(kind: str, entries: Iterable[str], details: dict | None) -> dict:
    marker: dict = {"kind": kind, "attnlab_version": __version__, "id": uuid.uuid4().hex}
    marker["entries"] = sorted(set(entries) - {MARKER_FILE})
    return {**(details or {}), **marker}


def write_marker(folder: str | os.PathLike, kind: str, details: dict | None = None, entries=()) -> None:
    """Mark `folder` as an attnlab output of `kind` (runs: at creation; others: by write_output)."""
    folder = Path(folder)
    text = json.dumps(_marker(kind, entries, details), indent=2, ensure_ascii=False) + "\n"
    (folder / MARKER_FILE).write_text(text, encoding="utf-8")


def _refuse_rival(claim: Claim) -> ValueError:
    return ValueError(
        f"{claim.flag} {claim.path} was written by another process while this one ran; nothing was replaced "
        f"and this result was discarded. Run again with another {claim.flag}"
    )


def _commit(tmp: Path, claim: Claim) -> None:
    """Rename `tmp` to claim.path: a folder that appeared meanwhile (another writer) is never replaced."""
    path = claim.path
    if claim.replace:
        old = aside_name(path)
        try:
            os.rename(path, old)
            moved = True
        except FileNotFoundError:
            moved = False  # removed meanwhile: commit as new
        if moved and (read_marker(old) or {}).get("id") != claim.token:
            _rename_back(old, path)
            raise _refuse_rival(claim)
        _rename_new(tmp, claim)
        if moved:
            shutil.rmtree(old, ignore_errors=True)
        return
    _rename_new(tmp, claim)


def _rename_new(tmp: Path, claim: Claim) -> None:
    # rename(2) replaces only an empty folder; a non-empty one means another writer got there first
    try:
        os.rename(tmp, claim.path)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise _refuse_rival(claim) from None
        raise


def _rename_back(old: Path, path: Path) -> None:
    with contextlib.suppress(OSError):  # the place was taken meanwhile: the earlier output stays, under `old`
        os.rename(old, path)


@contextmanager
def write_output(claim: Claim, details: dict | None = None) -> Iterator[Path]:
    """Yield a temp folder beside claim.path; on a clean exit mark it (kind, `details`) and rename it into
    place, checking again that nothing else was written there meanwhile; otherwise delete it."""
    tmp = fresh_temp_dir(claim.path)
    try:
        yield tmp
        write_marker(tmp, claim.kind, details, entries=_entries(tmp))
        _commit(tmp, claim)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def start_in_place(claim: Claim, details: dict | None = None) -> Path:
    """Prepare claim.path for an output written in place (a run): an earlier one (claimed with --force)
    is removed, then the folder is created and marked. Returns the folder."""
    path = claim.path
    if claim.keep:
        return path
    if claim.replace:
        aside = aside_name(path)
        old: Path | None = aside
        try:
            os.rename(path, aside)
        except FileNotFoundError:  # gone with the folder it was in (RUN/tb when the run was replaced)
            old = None
        if old is not None and (read_marker(old) or {}).get("id") != claim.token:
            _rename_back(old, path)
            raise _refuse_rival(claim)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    tmp = fresh_temp_dir(path)  # the marked folder appears whole, and only if the place is still free
    try:
        write_marker(tmp, claim.kind, details)
        _rename_new(tmp, Claim(path, claim.kind, flag=claim.flag))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def continue_output(path: str | os.PathLike, kind: str, *, flag: str = "--out") -> Claim:
    """An earlier output of `kind` at `path` to write more into in place (a resumed run's TensorBoard
    folder gains an event file), or, where there is none yet, `claim_output`'s new one."""
    path = _through_link(Path(path), flag)
    if path.is_dir() and any(path.iterdir()) and output_kind(path) == kind:
        return Claim(path, kind, flag=flag, keep=True)
    return claim_output(path, kind, flag=flag)


def claim_output_file(
    path: str | os.PathLike, kind: str, *, force: bool = False, flag: str = "--out", suffix: str = ".safetensors"
) -> Claim:
    """`claim_output` for a single file: new, an earlier file of the same kind (with `force`), or refused."""
    path = _through_link(Path(path), flag)
    what = describe(kind)
    if path.suffix != suffix:
        raise ValueError(f"{flag} {path} must end in {suffix}")
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; pass a file name ending in {suffix}")
    _check_writable(path.parent, flag)
    if not path.exists():
        return Claim(path, kind, flag=flag)
    found = output_kind(path)
    if found != kind:
        theirs = f"holds {describe(found)}" if found else "is a file attnlab did not write"
        raise ValueError(f"{flag} {path} {theirs}; attnlab never replaces it. Choose another {flag}")
    if not force:
        raise ValueError(f"{path} already holds {what}; pass --force to replace it, or choose another {flag}")
    return Claim(path, kind, replace=True, flag=flag)


@contextmanager
def write_output_file(claim: Claim) -> Iterator[Path]:
    """Yield a temp file path beside claim.path; on a clean exit it becomes claim.path (a new file never
    replaces one that appeared meanwhile), otherwise it is deleted."""
    path = claim.path
    tmp = make_temp_file(path)
    try:
        yield tmp
        if claim.replace:
            if output_kind(path) not in (claim.kind, None):
                raise _refuse_rival(claim)
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if the name was taken meanwhile, unlike rename
            except FileExistsError:
                raise _refuse_rival(claim) from None
            tmp.unlink()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = [
    "KINDS",
    "OUTPUT_METADATA",
    "Claim",
    "claim_output",
    "claim_output_file",
    "continue_output",
    "describe",
    "output_kind",
    "read_marker",
    "start_in_place",
    "write_marker",
    "write_output",
    "write_output_file",
]
