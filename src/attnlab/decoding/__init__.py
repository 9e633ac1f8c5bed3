"""From source ids to hypotheses through one generator: `DecodeOptions` (the only way in) -> logits processors
(bans, sampling's warpers) -> a strategy's step (greedy, beam with n-best, sampling, lexically constrained beam)
-> `Hypothesis`, with target prefixes, word alignments and the search's trace; and the Translator (text in,
text out) with the decoding defaults its run records."""

from .alignment import align_batch, alignment_heads, pharaoh, word_alignment
from .batches import length_batches, search_batches
from .constraints import ConstrainedBeamSearch, Progress
from .generator import generate, make_search
from .hypothesis import Finished, Hypothesis
from .options import MAX_BEAM, TRANSLATOR_DEFAULTS, DecodeOptions, OptionError
from .processors import (
    MinLength,
    NoRepeatNGram,
    Processor,
    SuppressTokens,
    Temperature,
    TopK,
    TopP,
    banned_ngram_tokens,
    processors_for,
)
from .protocol import check_source, expand_state, inference, reserve_steps
from .search import BeamSearch, Candidates, Greedy, Sampling, Search, SearchState
from .targets import holds_phrases, target_ids
from .trace import trace_path, trace_step
from .translator import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_OUTPUT_LEN,
    InputError,
    TextTooLong,
    Translation,
    Translator,
    encode_source,
    model_max_len,
)

__all__ = [
    "Hypothesis",
    "Finished",
    "inference",
    "check_source",
    "reserve_steps",
    "expand_state",
    "generate",
    "make_search",
    "Search",
    "SearchState",
    "Candidates",
    "Greedy",
    "BeamSearch",
    "Sampling",
    "ConstrainedBeamSearch",
    "Progress",
    "Processor",
    "MinLength",
    "NoRepeatNGram",
    "SuppressTokens",
    "Temperature",
    "TopK",
    "TopP",
    "banned_ngram_tokens",
    "processors_for",
    "trace_step",
    "trace_path",
    "align_batch",
    "alignment_heads",
    "word_alignment",
    "pharaoh",
    "MAX_BEAM",
    "TRANSLATOR_DEFAULTS",
    "DecodeOptions",
    "OptionError",
    "target_ids",
    "holds_phrases",
    "length_batches",
    "search_batches",
    "DEFAULT_MAX_OUTPUT_LEN",
    "DEFAULT_BATCH_SIZE",
    "InputError",
    "TextTooLong",
    "encode_source",
    "Translation",
    "model_max_len",
    "Translator",
]
