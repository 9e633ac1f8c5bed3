"""A run's config.json: written once with the vocabularies (and a translator's generation.json) when a run
starts, read (and checked) by every command that opens the run; the decoding precision chosen is recorded
there too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from attnlab import __version__
from attnlab.inference.precision import PrecisionChoice
from attnlab.models import TRANSLATORS
from attnlab.runs.generation import write_generation
from attnlab.runs.layout import CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE
from attnlab.runs.outputs import KINDS, read_marker
from attnlab.utils.files import read_json, read_json_object, write_json


# --------------------------------------------------------------------------- run config
def write_run_config(
    run_dir: str | os.PathLike,
    model_type: str,
    model_config: dict,
    train_config: dict,
    data_config: dict,
    *,
    src_vocab,
    tgt_vocab,
) -> None:
    """config.json and the vocabularies; a translator's decoding defaults too (generation.json)."""
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
    if model_type in TRANSLATORS:
        write_generation(run_dir)


# The sections of a run's config.json and what each must be; the sections may be absent only if not required.
_SECTIONS: dict[str, tuple[type, str, bool]] = {
    "model_type": (str, "a string (the model's type)", True),
    "model": (dict, "a JSON object (the model's settings)", True),
    "train": (dict, "a JSON object (the training settings)", False),
    "data": (dict, "a JSON object (the data settings)", False),
    "precision": (dict, "a JSON object (the recorded precision choice)", False),
}


_NOTED: set[str] = set()  # config files whose older spelling was pointed out (once a process)


def _upgrade_amp(train: dict, path: Path) -> dict:
    """An older run's `amp` flag read as today's `precision` (`amp: false` forced fp32), noted once a process."""
    train = dict(train)
    amp = train.pop("amp")
    if amp is False:
        train["precision"] = "fp32"
    if str(path) + ":amp" not in _NOTED:
        _NOTED.add(str(path) + ":amp")
        print(
            f"attnlab: note: {path} has the older field amp={str(amp).lower()}; "
            f"read as precision={train.get('precision', 'fp32')!r}",
            file=sys.stderr,
        )
    return train


def read_run_config(run_dir: str | os.PathLike) -> dict:
    """A run's config.json, checked once for every command: it is a JSON object whose sections have
    their types (a hand-edited `"data": null` is one line here, not a crash in whichever command reads it)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist; train one with `attnlab train --out {run_dir}`")
    path = run_dir / CONFIG_FILE
    marker = read_marker(run_dir)
    if marker is not None and marker["kind"] != "run":  # an export's config.json is not a run's
        raise ValueError(
            f"{run_dir} is {KINDS[marker['kind']]}, not a run folder; translate, evaluate, heads, attention and "
            "export take the run folder it was made from (config.json, vocabularies, model.safetensors)"
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: {run_dir} is not an attnlab run folder (`attnlab train` writes one)"
        )
    cfg = read_json_object(path, "run config")
    for key, (kind, what, required) in _SECTIONS.items():
        if key not in cfg:
            if required:
                raise ValueError(f"{path} lacks the key {key!r}; it was not written by attnlab train")
            continue
        if not isinstance(cfg[key], kind):
            got = "null" if cfg[key] is None else type(cfg[key]).__name__
            raise ValueError(
                f"{path}: {key!r} must be {what}, got {got}; the file was edited or damaged — restore "
                f"the run's config.json"
            )
    cfg.setdefault("train", {})  # an imported or hand-made run: nothing decoding needs lives there
    if "amp" in cfg["train"]:
        cfg["train"] = _upgrade_amp(cfg["train"], path)
    return cfg


def record_choice(run_dir: str | Path, choice: PrecisionChoice) -> None:
    """Add `"precision": {asked, picked, reason}` to a run's config.json (atomically)."""

    path = Path(run_dir) / CONFIG_FILE
    if path.is_file():
        cfg = read_json(path)
        if cfg.get("precision") != choice.to_dict():
            write_json(path, {**cfg, "precision": choice.to_dict()})
