"""From source ids to hypotheses: greedy, beam (n-best), sampling and lexically constrained search over the
decoding protocol, with length/repetition controls, target prefixes and word alignments; `DecodeOptions`;
and the Translator (text in, text out)."""

from .alignment import align_batch, alignment_heads, pharaoh, word_alignment
from .batches import decode_batches, length_batches, search_batches
from .beam import Finished, beam_search, nbest_search
from .constraints import Progress, constrained_search
from .controls import Controls, banned_ngram_tokens
from .greedy_search import greedy
from .hypothesis import Hypothesis
from .options import MAX_BEAM, DecodeOptions, target_ids
from .protocol import check_source, expand_state, inference, reserve_steps
from .sampling import filter_scores, sample
from .search import beam_step
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
    "inference",
    "check_source",
    "reserve_steps",
    "expand_state",
    "greedy",
    "beam_step",
    "trace_step",
    "trace_path",
    "beam_search",
    "nbest_search",
    "Finished",
    "Controls",
    "banned_ngram_tokens",
    "filter_scores",
    "sample",
    "Progress",
    "constrained_search",
    "align_batch",
    "alignment_heads",
    "word_alignment",
    "pharaoh",
    "MAX_BEAM",
    "DecodeOptions",
    "target_ids",
    "length_batches",
    "decode_batches",
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
