"""A training run's settings, settled as `attnlab train` settles them, from Python as from the command line:
a preset (or a saved config.json), then overrides; every part checked before any data is read or anything
written.

    s = resolve("transformer", preset="tiny", overrides={"train": {"lr": 2e-3}, "model": {"num_layers": 1}})
    s.sections["model"], s.train, s.sections["data"]      # the model and data settings, the TrainConfig
    train_run(s.model_type, s.sections["model"], s.train, s.sections["data"], s.default_run_dir())
    s.described()                                          # what `attnlab train --print-config` prints

Overrides are sections of keys, `{"model": {...}, "train": {...}, "data": {...}}`; `parse_set` reads the
`SECTION.KEY=VALUE` items of `--set`. A resumed run may change only its limits (`check_resumable`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.runs.config import read_run_config
from attnlab.training.config import TrainConfig
from attnlab.training.presets import DEFAULT_PRESET, get_preset, load_config_file, resolved_config
from attnlab.training.tasks import TRANSLATION, Task, task_for

SECTIONS = ("model", "train", "data")


def no_overrides() -> dict[str, dict]:
    """Empty overrides, one dict per section."""
    return {section: {} for section in SECTIONS}


def parse_set(items: Iterable[str], into: dict[str, dict] | None = None) -> dict[str, dict]:
    """Overrides from `SECTION.KEY=VALUE` items (VALUE is JSON, or a bare word), added to `into`.

    Examples:
        >>> parse_set(["model.num_layers=3", "data.tokenizer=bpe"])["model"]
        {'num_layers': 3}
    """
    out = into if into is not None else no_overrides()
    for item in items:
        target, sep, raw = item.partition("=")
        section, dot, key = target.partition(".")
        if not sep or not dot or section not in out:
            raise ValueError(f"--set expects SECTION.KEY=VALUE with SECTION in model/train/data, got {item!r}")
        try:
            out[section][key] = json.loads(raw)
        except json.JSONDecodeError:
            out[section][key] = raw  # a bare word such as --set data.tokenizer=bpe
    return out


@dataclass
class Settings:
    """A run's settled settings: its model type, the model/train/data sections and the TrainConfig."""

    model_type: str
    sections: dict[str, dict]  # "model", "train" and "data", with the overrides applied
    train: TrainConfig
    name: str  # the preset's name, or the config file's stem (for the default run folder)

    @property
    def task(self) -> Task:
        return task_for(self.model_type)

    def default_run_dir(self) -> str:
        """runs/<model>-<preset>, or runs/<model>-<config file's name>."""
        return os.path.join("runs", f"{self.model_type}-{self.name}")

    def described(self) -> dict:
        """The settings in the sections of a run's config.json (`--print-config`): translators with every
        field (the data fills the vocabulary sizes); image runs as given (the data fills sizes and classes)."""
        if self.task is TRANSLATION:
            return resolved_config(self.model_type, self.sections, self.train.to_dict())
        return {"model_type": self.model_type, **self.sections, "train": self.train.to_dict()}


def resolve(
    model_type: str | None = None,
    preset: str | None = None,
    config_file: str | os.PathLike | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    names: Mapping[str, str] | None = None,
) -> Settings:
    """The preset (or `config_file`) of `model_type` with `overrides` applied, every part validated (nothing
    written, no data read). `model_type` None: the config file's, else "transformer". `names`: how to call
    a data key in messages (e.g. max_len -> '--max-len'; default '--set data.KEY')."""
    if config_file:
        if preset:
            raise ValueError("--config replaces --preset; give one of them")
        file_type, sections = load_config_file(config_file)
        if model_type not in (None, file_type):
            raise ValueError(
                f"--model {model_type} disagrees with {config_file} (model_type {file_type!r}); drop --model"
            )
        model_type, name = file_type, Path(config_file).stem
    else:
        model_type = model_type or "transformer"
        sections = get_preset(model_type, preset)
        name = preset or DEFAULT_PRESET[model_type]
    over = overrides or {}
    for section in SECTIONS:
        sections.setdefault(section, {}).update(over.get(section, {}))
    train = TrainConfig.from_dict(sections["train"])
    task = task_for(model_type)
    sections["data"] = task.check(model_type, sections["model"], sections["data"], train.seed, over.get("data"), names)
    return Settings(model_type, sections, train, name)


def vocabulary_for(preset: str, model_type: str = "transformer") -> dict[str, Any]:
    """The vocabulary `attnlab prepare --preset NAME` builds for data that preset will train on: its tokenizer,
    subword size and min_freq; a preset that shares embeddings between the sides gets one joint subword
    vocabulary (two word vocabularies could not share them).

    Examples:
        >>> vocabulary_for("laptop")
        {'tokenizer': 'bpe', 'vocab_size': 4000, 'min_freq': 2}
        >>> vocabulary_for("cpu-small")["tokenizer"]    # the book's word vocabularies for en-fr
        'auto'
    """
    p = get_preset(model_type, preset)
    data, shared = p.get("data", {}), p.get("model", {}).get("share_embeddings", False)
    out: dict[str, Any] = {"tokenizer": data.get("tokenizer", "bpe" if shared else "auto")}
    if "bpe_vocab_size" in data:
        out["vocab_size"] = data["bpe_vocab_size"]
    if "min_freq" in data:
        out["min_freq"] = data["min_freq"]
    return out


def resumed_config(run_dir: str | os.PathLike, train_overrides: Mapping[str, Any] | None = None) -> dict:
    """A run's config.json with its train section as a resume with these overrides (its limits) runs it."""
    cfg = read_run_config(run_dir)
    cfg["train"] = TrainConfig.from_dict({**cfg.get("train", {}), **(train_overrides or {})}).to_dict()
    return cfg


__all__ = ["SECTIONS", "Settings", "no_overrides", "parse_set", "resolve", "resumed_config", "vocabulary_for"]
