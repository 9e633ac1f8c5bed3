"""The prepared corpus: `prepare` (plan -> encode -> write -> manifest) writes token-id shards in the folder
`layout` describes; `open_prepared` reads them back lazily; `load_parallel_data` prepares any parallel corpus
once into the user cache and opens it."""

from .cache import load_parallel_data, wants_parallel
from .layout import FORMAT, META, SPLITS, TOKENIZERS, VERSION, resolve_tokenizer
from .manifest import check_manifest, write_manifest
from .pipeline import prepare
from .reader import EpochPlan, HeldOutExamples, ShardedExamples, ShardExample, is_prepared, open_prepared

__all__ = [
    "FORMAT",
    "META",
    "SPLITS",
    "TOKENIZERS",
    "VERSION",
    "EpochPlan",
    "HeldOutExamples",
    "ShardExample",
    "ShardedExamples",
    "check_manifest",
    "is_prepared",
    "load_parallel_data",
    "open_prepared",
    "prepare",
    "resolve_tokenizer",
    "wants_parallel",
    "write_manifest",
]
