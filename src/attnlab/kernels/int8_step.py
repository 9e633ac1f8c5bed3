"""The C passes of int8's fused decoding step (`csrc/int8_step.c`) with their ctypes signatures.

    native_int8_step()  -> {symbol: C function} of every pass the step runs, or None where one cannot be had
    int8_step           the step itself: `attnlab.inference.int8_step.Int8DecoderStep`, whose fallback is
                        the model's own modules (a step it does not cover runs them, with the same logits)

The step also runs `csrc/int8_rows.c`'s rescale with `int8_rows`' signature (`loader.function` keeps a
symbol's first one, so every caller of a symbol passes the same).

Examples:
    >>> sorted(SIGNATURES)[:2]
    ['attnlab_step_add_ln', 'attnlab_step_attention']
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from . import int8_rows
from .loader import I64, PTR, function

__all__ = ["RESTYPE", "SIGNATURES", "native_int8_step"]

_F, _INT = ctypes.c_float, ctypes.c_int
RESTYPE = _INT  # every pass returns a status: 0 done, 1 out of memory (attention: 2 bad lengths, 4 not written)
SIGNATURES = {
    "attnlab_step_embed": [PTR, I64, I64, PTR, I64, I64, _F, PTR, PTR, PTR, PTR],
    "attnlab_step_attention": [PTR, I64, PTR, PTR, PTR, I64, I64, I64]
    + [PTR, I64, I64, I64] * 2
    + [_INT, I64, PTR, I64, I64, PTR, I64, _F, PTR, PTR],
    "attnlab_step_add_ln": [PTR, I64, I64, PTR, PTR, PTR, PTR, PTR, PTR, _F, PTR, PTR, PTR],
    "attnlab_step_relu": [PTR, I64, I64, PTR, PTR, PTR, PTR, PTR],
}
_RESCALE = "attnlab_dequantize_f32"  # int8_rows.c's, run on the logits


def native_int8_step() -> dict[str, Callable] | None:
    """The step's C functions by symbol (int8_rows' rescale included), or None where one cannot be had (no
    compiler, ATTNLAB_NATIVE=0, inside `loader.off()`)."""
    fns = {s: function("int8_step", s, a, RESTYPE) for s, a in SIGNATURES.items()}
    fns[_RESCALE] = function("int8_rows", _RESCALE, int8_rows.SIGNATURES[_RESCALE])
    found = {s: f for s, f in fns.items() if f is not None}
    return found if len(found) == len(fns) else None
