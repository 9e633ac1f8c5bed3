"""Checkpoints of a run: written whole or not at all, verified, pruned, averaged.

A checkpoint folder (`checkpoints/step_NNNNNNN/`, see `attnlab.runs.layout`) is filled under a temp
name and renamed as a whole, so a crash never leaves half a checkpoint; its manifest.json (size +
sha256 of every other file) is written last, so a checkpoint damaged later (a full disk, a copy cut
short) is recognised and skipped by `--resume`. Loading never unpickles code: weights are
safetensors, trainer state is read with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from torch import Tensor, nn

from attnlab.runs.layout import CHECKPOINTS, MANIFEST_FILE, META_FILE, STATE_FILE, WEIGHTS_FILE
from attnlab.runs.weights import read_weights, save_weights
from attnlab.utils.files import atomic_dir, atomic_path, json_safe, read_json, write_json


# --------------------------------------------------------------------------- checkpoints
def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{step:07d}"


def save_checkpoint(run_dir: str | os.PathLike, step: int, model: nn.Module, trainer_state: dict, meta: dict) -> Path:
    """Write checkpoints/step_NNNNNNN/ as a whole: filled under a temp name, the manifest last, then
    renamed into place."""
    final = checkpoint_dir(run_dir, step)
    # The same step may be saved again (the end of a run that was just checkpointed): atomic_dir swaps.
    with atomic_dir(final) as tmp:
        save_weights(model, tmp / WEIGHTS_FILE)
        torch.save(trainer_state, tmp / STATE_FILE)
        write_json(tmp / META_FILE, json_safe(meta))
        write_json(
            tmp / MANIFEST_FILE, {"files": {f: _file_digest(tmp / f) for f in (WEIGHTS_FILE, STATE_FILE, META_FILE)}}
        )
    return final


def _file_digest(path: Path) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"size": path.stat().st_size, "sha256": h.hexdigest()}


def verify_checkpoint(ckpt: str | os.PathLike) -> str | None:
    """Why checkpoint folder `ckpt` cannot be trusted (a missing, resized or altered file, per its
    manifest), or None when it is intact. A checkpoint from before manifests only needs its files."""
    ckpt = Path(ckpt)
    manifest_path = ckpt / MANIFEST_FILE
    if not manifest_path.is_file():
        missing = [f for f in (WEIGHTS_FILE, STATE_FILE) if not (ckpt / f).is_file()]
        return f"{missing[0]} is missing" if missing else None
    try:
        files = read_json(manifest_path)["files"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"{MANIFEST_FILE} is unreadable ({exc})"
    for name, want in files.items():
        path = ckpt / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != want["size"]:
            return f"{name} has {size} bytes, its manifest says {want['size']} (truncated or replaced)"
        if _file_digest(path)["sha256"] != want["sha256"]:
            return f"{name} does not match its sha256 in {MANIFEST_FILE} (corrupted)"
    return None


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint folders of a run, oldest first (temp folders start with '.' and are ignored)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and p.name[5:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def clean_temp_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Delete the temp folders (`.step_*`) a killed save left behind; returns what was removed.
    Call only when no other process is writing this run (its start or resume, on rank 0)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    leftovers = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(".step_")]
    for p in leftovers:
        shutil.rmtree(p, ignore_errors=True)
    return leftovers


def load_trainer_state(ckpt: str | os.PathLike) -> dict:
    path = Path(ckpt) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: checkpoint {Path(ckpt).name} has no trainer state")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ValueError(
            f"{path} cannot be read ({type(exc).__name__}: {str(exc)[:120]}); the checkpoint "
            f"is damaged — resume from an earlier one"
        ) from exc


def prune_checkpoints(run_dir: str | os.PathLike, keep_last: int, keep_best: int) -> list[Path]:
    """Delete checkpoints that are neither among the newest `keep_last` nor the `keep_best` best by
    validation score (meta.json: its `best_by` score, validation BLEU when it names none). The newest is
    always kept (it is what --resume continues from)."""
    ckpts = list_checkpoints(run_dir)
    keep = set(ckpts[-max(keep_last, 1) :])
    scored = []
    for p in ckpts:
        try:
            meta = read_json(p / META_FILE)
            bleu = meta.get(meta.get("best_by", "valid_bleu"))
        except (FileNotFoundError, ValueError):
            bleu = None
        if bleu is not None:
            scored.append((-bleu, int(p.name[5:]), p))
    keep.update(p for _, _, p in sorted(scored)[:keep_best])
    removed = [p for p in ckpts if p not in keep]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> dict[str, Tensor]:
    """Element-wise mean of the weights of several checkpoints (folders or .safetensors files), in
    float64 then cast back, as fairseq's average_checkpoints.py / OpenNMT's average_models.py."""
    if not paths:
        raise ValueError("average_checkpoints: no checkpoints given")
    # Every checkpoint folder is checked against its manifest first: a damaged one fails before any work.
    for ckpt in map(Path, paths):
        why = verify_checkpoint(ckpt) if ckpt.is_dir() else None
        if why is not None:
            raise ValueError(
                f"checkpoint {ckpt.name} ({ckpt}) is damaged: {why}; average without it "
                f"(a smaller --last, or delete that folder)"
            )
    total: dict[str, Tensor] | None = None
    dtypes = {}
    for p in paths:
        p = Path(p)
        weights = _read_checkpoint_weights(p / WEIGHTS_FILE if p.is_dir() else p)
        if total is None:
            total = {k: v.double() for k, v in weights.items()}
            dtypes = {k: v.dtype for k, v in weights.items()}
            continue
        if set(weights) != set(total):
            raise ValueError(
                f"{p} holds different tensors than {paths[0]}: cannot average checkpoints of different models"
            )
        for k, v in weights.items():
            if v.shape != total[k].shape:
                raise ValueError(
                    f"{p}: tensor {k!r} has shape {tuple(v.shape)}, {paths[0]} has {tuple(total[k].shape)}"
                )
            total[k] += v.double()
    assert total is not None  # paths is not empty
    return {k: (v / len(paths)).to(dtypes[k]) for k, v in total.items()}


def _read_checkpoint_weights(path: Path) -> dict[str, Tensor]:
    try:
        return read_weights(path)
    except SafetensorError as exc:
        where = path.parent.name if path.name == WEIGHTS_FILE else path.name
        raise ValueError(
            f"{path} cannot be read ({str(exc).strip()[:120]}): {where} is damaged; average without it"
        ) from exc


def save_tensors(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write `tensors` as one safetensors file, atomically (temp file + rename)."""
    with atomic_path(Path(path)) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
