"""Run folders: atomic writes, checkpoints, averaging, and `load_translator` (the one way in for
the CLI, the demo and the web explorer; the `Translator` itself lives in `attnlab.translator`).

    run_dir/
      config.json          {"model_type", "model": {...}, "train": {...}, "data": {...}, "attnlab_version"}
      src_vocab.json, tgt_vocab.json
      model.safetensors    final weights
      checkpoints/step_0000500/{model.safetensors, trainer_state.pt, meta.json, manifest.json}
      log.jsonl            one JSON object per event (train / eval / end)

Every file is written to a temp name in its folder and renamed into place, and a checkpoint folder is
filled under a temp name and renamed as a whole, so a crash never leaves half a checkpoint; its
manifest.json (size + sha256 of every other file) is written last, so a checkpoint damaged later
(a full disk, a copy cut short) is recognised and skipped by `--resume`. Loading
never unpickles code: weights are safetensors, trainer state is read with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from attnlab._io import atomic_dir, atomic_path
from attnlab.weights import (  # noqa: F401 (re-exported: run folders and their callers load weights through here)
    CONFIG_METADATA,
    check_weights,
    load_weights,
    read_header,
    read_weights,
    save_weights,
)

if TYPE_CHECKING:
    from attnlab.translator import Translator

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"
MANIFEST_FILE = "manifest.json"
SRC_VOCAB_FILE, TGT_VOCAB_FILE = "src_vocab.json", "tgt_vocab.json"
CHECKPOINTS = "checkpoints"
DEFAULT_RUN = Path("runs") / "demo" / "transformer"


# --------------------------------------------------------------------------- atomic files
def _atomic_write(path: Path, write) -> None:
    """Call write(tmp_path) on a temp file beside `path`, then rename it into place."""
    with atomic_path(path) as tmp:
        write(tmp)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    _atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from exc


def _json_safe(obj: Any) -> Any:
    """NaN and infinities as null: JSON has no such numbers (json.dumps would write a bare NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def append_jsonl(path: str | os.PathLike, obj: dict) -> None:
    """Append one event; a single short write per line keeps lines whole even if killed.
    Non-finite numbers are written as null, so every line stays valid JSON."""
    line = json.dumps(_json_safe(obj), ensure_ascii=False, allow_nan=False)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


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
        write_json(tmp / META_FILE, _json_safe(meta))
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
    validation BLEU (meta.json). The newest is always kept (it is what --resume continues from)."""
    ckpts = list_checkpoints(run_dir)
    keep = set(ckpts[-max(keep_last, 1) :])
    scored = []
    for p in ckpts:
        try:
            bleu = read_json(p / META_FILE).get("valid_bleu")
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
    total: dict[str, Tensor] | None = None
    dtypes = {}
    for p in paths:
        p = Path(p)
        weights = read_weights(p / WEIGHTS_FILE if p.is_dir() else p)
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


def save_tensors(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file

    _atomic_write(
        Path(path), lambda tmp: save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
    )


# --------------------------------------------------------------------------- run config
def write_run_config(
    run_dir: str | os.PathLike,
    model_type: str,
    model_config: dict,
    train_config: dict,
    data_config: dict,
    src_vocab,
    tgt_vocab,
) -> None:
    from attnlab import __version__

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    src_vocab.save(run_dir / SRC_VOCAB_FILE)
    tgt_vocab.save(run_dir / TGT_VOCAB_FILE)
    write_json(
        run_dir / CONFIG_FILE,
        {
            "model_type": model_type,
            "model": model_config,
            "train": train_config,
            "data": data_config,
            "attnlab_version": __version__,
        },
    )


def read_run_config(run_dir: str | os.PathLike) -> dict:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist; train one with `attnlab train --out {run_dir}`")
    cfg = read_json(run_dir / CONFIG_FILE)
    for key in ("model_type", "model"):
        if key not in cfg:
            raise ValueError(f"{run_dir / CONFIG_FILE} lacks the key {key!r}; it was not written by attnlab train")
    return cfg


# --------------------------------------------------------------------------- loading a translator
def load_translator(
    run_dir: str | os.PathLike = DEFAULT_RUN,
    device: str | torch.device = "cpu",
    weights: str | os.PathLike | None = None,
    precision: str = "fp32",
) -> Translator:
    """Rebuild the model of a run folder and load its final weights (or `weights`: a checkpoint
    folder or an averaged .safetensors file), prepared to decode in `precision` ('auto', 'fp32',
    'bf16', 'int8'; see attnlab.precision); `translator.precision` says what runs and why.

    Raises FileNotFoundError naming a missing file, ValueError when config, vocabularies and
    weights disagree.
    """
    from attnlab.data import load_vocab
    from attnlab.models import build_model
    from attnlab.runtime import resolve_device
    from attnlab.translator import Translator, model_max_len

    if not isinstance(device, torch.device):
        device = resolve_device(device)  # a bad --device is one clear line before any file is read

    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    for name in (SRC_VOCAB_FILE, TGT_VOCAB_FILE):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir / name} is missing: the run folder lacks its vocabulary {name}")
    src_vocab, tgt_vocab = load_vocab(run_dir / SRC_VOCAB_FILE), load_vocab(run_dir / TGT_VOCAB_FILE)
    model_cfg = cfg["model"]
    for side, vocab, fname in (("src", src_vocab, SRC_VOCAB_FILE), ("tgt", tgt_vocab, TGT_VOCAB_FILE)):
        size = model_cfg.get(f"{side}_vocab_size")
        if size is not None and size != len(vocab):
            raise ValueError(
                f"{run_dir / CONFIG_FILE} says {side}_vocab_size={size} but {run_dir / fname} holds "
                f"{len(vocab)} tokens; the files come from different runs"
            )
    # Built on the meta device first: a config that asks for gigabytes (a hand-edited ffn_num_hiddens)
    # is compared with the weights' header before a single parameter is allocated.
    with torch.device("meta"):
        skeleton = build_model(cfg["model_type"], model_cfg)
    if weights is None:
        weights_path = run_dir / WEIGHTS_FILE
        if not weights_path.is_file():
            ckpts = list_checkpoints(run_dir)
            hint = (
                (
                    f"; the run has checkpoints (latest {ckpts[-1].name}): resume it with "
                    f"`attnlab train --resume {run_dir}` or pass that checkpoint"
                )
                if ckpts
                else ""
            )
            raise FileNotFoundError(
                f"{weights_path} is missing: the run folder has no final weights {WEIGHTS_FILE}{hint}"
            )
    else:
        weights_path = Path(weights)
        if weights_path.is_dir():
            weights_path = weights_path / WEIGHTS_FILE
    what = f"{run_dir / CONFIG_FILE} and its vocabularies"
    check_weights(skeleton, weights_path, what, config=model_cfg)
    model = build_model(cfg["model_type"], model_cfg)
    load_weights(model, weights_path, what)
    from attnlab.precision import prepare_for_inference, resolve_precision

    choice = resolve_precision(precision, device)
    prepared = prepare_for_inference(model.to(device), choice, device)
    translator = Translator(prepared, src_vocab, tgt_vocab, cfg, device=device, max_len=model_max_len(cfg))
    translator.precision = choice
    return translator
