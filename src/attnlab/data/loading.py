"""A run's data settings (`loader` + the loader's keyword arguments) -> the data, checked before any
file is read."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .prepared.cache import load_parallel_data, wants_parallel
from .prepared.layout import META, resolve_tokenizer
from .prepared.reader import is_prepared
from .translation import TranslationData, load_d2l_data, load_translation_data


def _loader(data_config):
    """(loader function, its keyword arguments) for a run's data settings, checked without loading.

    Raises ValueError naming an unknown loader or any setting the loader does not take.
    """
    opts = dict(data_config)
    loader = opts.pop("loader", "translation")
    if loader == "parallel" or (loader == "translation" and wants_parallel(opts)):
        # Aligned files, .gz, other languages, prepared shards: that loader checks its own keys.
        return (lambda **o: load_parallel_data(o)), opts
    loaders: dict[str, Callable[..., TranslationData]] = {"d2l": load_d2l_data, "translation": load_translation_data}
    if loader not in loaders:
        raise ValueError(f"unknown data loader {loader!r}; expected one of {sorted(loaders)}")
    accepted = list(inspect.signature(loaders[loader]).parameters)
    unknown = sorted(set(opts) - set(accepted))
    if unknown:
        hint = " (the book's d2l setting is fixed; use --preset tiny or cpu-small to change these)"
        raise ValueError(
            f"the {loader!r} data loader does not take {unknown}; it takes {accepted}"
            + (hint if loader == "d2l" else "")
        )
    return loaders[loader], opts


def check_data_config(data_config) -> None:
    """Raise ValueError for data settings `load_data` would refuse, before any file is read."""
    _loader(data_config)


def load_data(data_config):
    """Rebuild a run's data from its saved settings (`loader` + the loader's keyword arguments)."""
    loader, opts = _loader(data_config)
    return loader(**opts)


# Data settings of a run -> the prepare setting of a prepared folder they correspond to.
_PREPARED_KEYS = {"bpe_vocab_size": "vocab_size"}
_NOT_SETTINGS = {"path", "loader"}


def check_prepared_overrides(
    path: str | os.PathLike | None, overrides: Mapping[str, Any], names: Mapping[str, str] | None = None
) -> None:
    """ValueError when a data setting asked for (a flag, not a preset's default) disagrees with the
    prepared folder `path` was made with, or has no meaning for it; nothing when `path` is no
    prepared folder. `names` says how to call each key in the message (e.g. max_len -> '--max-len')."""
    if path is None or not is_prepared(path):
        return
    try:
        meta = json.loads((Path(path) / META).read_text(encoding="utf-8"))
        made = {**meta["settings"], "src_lang": meta["src_lang"], "tgt_lang": meta["tgt_lang"]}
    except (OSError, ValueError, KeyError, TypeError):
        return  # a damaged folder: opening it says what is wrong
    names = names or {}
    for key, value in overrides.items():
        if key in _NOT_SETTINGS:
            continue
        name = names.get(key, f"--set data.{key}")
        folder_key = _PREPARED_KEYS.get(key, key)
        if folder_key not in made:
            raise ValueError(
                f"{name} does not apply to the prepared corpus {path} (its settings were fixed by "
                f"`attnlab prepare`); drop {name}"
            )
        want = made[folder_key]
        if key == "tokenizer" and value == "auto":
            value = resolve_tokenizer("auto", made["src_lang"], made["tgt_lang"])
        if value != want:
            raise ValueError(
                f"{name} {value!r} disagrees with the prepared corpus {path}, made with {folder_key}={want!r}; "
                f"drop {name}, or prepare the corpus again with the setting you want"
            )
