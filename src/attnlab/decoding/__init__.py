"""From source ids to hypotheses: greedy and beam search over the decoding protocol, and the Translator
(text in, text out)."""

from .argmax import argmax_rows, pick
from .batches import decode_batches, length_batches
from .beam import Finished, beam_search
from .greedy_search import greedy
from .hypothesis import Hypothesis
from .protocol import check_source, expand_state, inference, reserve_steps
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
    "argmax_rows",
    "pick",
    "greedy",
    "beam_step",
    "trace_step",
    "trace_path",
    "beam_search",
    "Finished",
    "length_batches",
    "decode_batches",
    "DEFAULT_MAX_OUTPUT_LEN",
    "DEFAULT_BATCH_SIZE",
    "InputError",
    "TextTooLong",
    "encode_source",
    "Translation",
    "model_max_len",
    "Translator",
]
