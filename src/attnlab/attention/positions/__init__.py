"""Position schemes, one module each (sinusoidal, learned, rope, alibi, t5, none), looked up by name."""

from .alibi import ALIBI, Alibi, AlibiBias, alibi_slopes
from .base import (
    EMBEDDINGS,
    ENTRIES,
    NOTHING,
    QUERIES_KEYS,
    SCORES,
    NoOptions,
    PositionScheme,
    StackPositions,
    StackShape,
)
from .learned import LEARNED, Learned
from .none import NONE, NoPositions
from .registry import POSITIONS, SCHEMES, get_scheme, register, unregister
from .rope import ROPE, Rope, RopeOptions, RotaryEmbedding, half_split_permutation, rotary_dim, rotate_half
from .sinusoidal import (
    LAYOUTS,
    SINUSOIDAL,
    PositionalEncoding,
    Sinusoidal,
    SinusoidalOptions,
    sinusoidal_2d,
    sinusoidal_encoding,
)
from .t5 import T5, T5_BIAS, T5Options, T5RelativeBias, t5_relative_bucket

__all__ = [
    "ALIBI",
    "EMBEDDINGS",
    "ENTRIES",
    "LAYOUTS",
    "LEARNED",
    "NONE",
    "NOTHING",
    "POSITIONS",
    "QUERIES_KEYS",
    "ROPE",
    "SCHEMES",
    "SCORES",
    "SINUSOIDAL",
    "T5",
    "T5_BIAS",
    "Alibi",
    "AlibiBias",
    "Learned",
    "NoOptions",
    "NoPositions",
    "PositionScheme",
    "PositionalEncoding",
    "Rope",
    "RopeOptions",
    "RotaryEmbedding",
    "Sinusoidal",
    "SinusoidalOptions",
    "StackPositions",
    "StackShape",
    "T5Options",
    "T5RelativeBias",
    "alibi_slopes",
    "get_scheme",
    "half_split_permutation",
    "register",
    "rotary_dim",
    "rotate_half",
    "sinusoidal_2d",
    "sinusoidal_encoding",
    "t5_relative_bucket",
    "unregister",
]
