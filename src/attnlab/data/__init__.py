"""English–French data: reading (with download and cache), the book's preprocessing, vocabularies
(word and BPE), seeded splits and token-budgeted batches. Data: Tatoeba via manythings.org, CC-BY 2.0 FR."""

from collections.abc import Callable

from .batching import Batch, collate, iterate_batches, plan_batches
from .corpus import ReadStats, cache_dir, download_fra_eng, read_fra_eng, resolve_data_path, sample_data_path
from .formats import CorpusReport, FileReport, iter_pairs
from .parallel import load_parallel_data
from .shards import ShardedExamples, open_prepared, prepare
from .text import detokenize, preprocess, tokenize
from .translation import ATTRIBUTION, BOOK_EVAL_PAIRS, Example, TranslationData, load_d2l_data, load_translation_data
from .vocab import SubwordVocab, Vocab, load_vocab

__all__ = [
    "read_fra_eng",
    "preprocess",
    "tokenize",
    "detokenize",
    "Vocab",
    "SubwordVocab",
    "Example",
    "Batch",
    "TranslationData",
    "load_translation_data",
    "load_d2l_data",
    "iterate_batches",
    "plan_batches",
    "sample_data_path",
    "load_vocab",
    "collate",
    "ReadStats",
    "cache_dir",
    "download_fra_eng",
    "resolve_data_path",
    "BOOK_EVAL_PAIRS",
    "load_data",
    "check_data_config",
    "CorpusReport",
    "FileReport",
    "iter_pairs",
    "load_parallel_data",
    "ShardedExamples",
    "open_prepared",
    "prepare",
    "ATTRIBUTION",
]


def _loader(data_config):
    """(loader function, its keyword arguments) for a run's data settings, checked without loading.

    Raises ValueError naming an unknown loader or any setting the loader does not take.
    """
    import inspect

    from .parallel import wants_parallel

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
