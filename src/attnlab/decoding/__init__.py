"""From source ids to hypotheses through one generator: `DecodeOptions` (the only way in) -> logits processors
(bans, sampling's warpers) -> a strategy's step (greedy, beam with n-best, sampling, lexically constrained beam)
-> `Hypothesis`, with target prefixes, word alignments and the search's trace; and the Translator (text in,
text out) with the decoding defaults its run records.

The face names what a user of decoding calls or extends; the loop's helpers (the model protocol's
`inference`, `expand_state`, the trace's steps, batching) stay in their modules."""

from .align import alignment_heads, pharaoh, word_alignment
from .constraints import ConstrainedBeamSearch, Progress
from .generator import generate, make_search
from .hypothesis import Finished, Hypothesis
from .options import MAX_BEAM, TRANSLATOR_DEFAULTS, DecodeOptions, OptionError
from .processors import MinLength, NoRepeatNGram, Processor, SuppressTokens, Temperature, TopK, TopP, processors_for
from .search import BeamSearch, Candidates, Greedy, Sampling, Search, SearchState
from .translator import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_OUTPUT_LEN,
    MAX_LEN_A,
    MAX_LEN_B,
    InputError,
    TextTooLong,
    Translation,
    Translator,
)

__all__ = [
    "DecodeOptions",
    "OptionError",
    "MAX_BEAM",
    "TRANSLATOR_DEFAULTS",
    "Translator",
    "Translation",
    "InputError",
    "TextTooLong",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_OUTPUT_LEN",
    "MAX_LEN_A",
    "MAX_LEN_B",
    "generate",
    "make_search",
    "Hypothesis",
    "Finished",
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
    "processors_for",
    "alignment_heads",
    "word_alignment",
    "pharaoh",
]
