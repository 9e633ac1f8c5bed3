"""From source ids to hypotheses: greedy and beam search over the decoding protocol, and the Translator (text in, text out)."""

from .hypothesis import Hypothesis
from .protocol import inference, check_source, reserve_steps, expand_state
from .argmax import argmax_rows, pick
from .greedy_search import greedy
from .search import beam_step
from .trace import trace_step, trace_path
from .beam import beam_search, Finished
from .batches import length_batches, decode_batches
from .translator import (
    DEFAULT_MAX_OUTPUT_LEN,
    DEFAULT_BATCH_SIZE,
    InputError,
    TextTooLong,
    encode_source,
    Translation,
    model_max_len,
    Translator,
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
