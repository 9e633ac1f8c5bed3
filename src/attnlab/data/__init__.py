"""English–French data: reading (with download and cache), the book's preprocessing, vocabularies
(word and BPE), seeded splits and token-budgeted batches. Data: Tatoeba via manythings.org, CC-BY 2.0 FR."""

from .batching import Batch, collate, iterate_batches, plan_batches
from .corpus import ReadStats, cache_dir, download_fra_eng, read_fra_eng, resolve_data_path, sample_data_path
from .formats import CorpusReport, FileReport, iter_pairs
from .loading import check_data_config, check_prepared_overrides, load_data
from .prepared import ShardedExamples, load_parallel_data, open_prepared, prepare
from .text import detokenize, preprocess, tokenize
from .translation import (
    ATTRIBUTION,
    BOOK_EVAL_PAIRS,
    SAMPLE_CREDIT,
    Example,
    TranslationData,
    data_credit,
    load_d2l_data,
    load_translation_data,
)
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
    "check_prepared_overrides",
    "CorpusReport",
    "FileReport",
    "iter_pairs",
    "load_parallel_data",
    "ShardedExamples",
    "open_prepared",
    "prepare",
    "ATTRIBUTION",
    "SAMPLE_CREDIT",
    "data_credit",
]
