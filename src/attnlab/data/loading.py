"""A run's data settings (`loader` + the loader's keyword arguments) -> the data, checked before any
file is read."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from .parallel import load_parallel_data, wants_parallel
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
