"""A run's config.json: written once with the vocabularies when a run starts, read (and checked)
by every command that opens the run; the decoding precision chosen is recorded there too.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnlab import __version__
from attnlab.runs.layout import CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE
from attnlab.utils.files import read_json, write_json
from attnlab.utils.precision import PrecisionChoice


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


def record_choice(run_dir: str | Path, choice: PrecisionChoice) -> None:
    """Add `"precision": {asked, picked, reason}` to a run's config.json (atomically)."""

    path = Path(run_dir) / CONFIG_FILE
    if path.is_file():
        cfg = read_json(path)
        if cfg.get("precision") != choice.to_dict():
            write_json(path, {**cfg, "precision": choice.to_dict()})
