"""attnlab's C passes (`src/attnlab/csrc`) and its Triton kernel: the loader (build, cache, verify) and one
wrapper module per kernel, each holding its signatures, the check of what it accepts and its fallback.

    loader        build at first use, cache under ~/.cache/attnlab/native, verify, load; `off()`, `status(name)`
    switches      `Switch` (a fast path on/off), ATTNLAB_NATIVE as a boolean, `fingerprint()` of what is on
    few_queries   a decoding step's attention          finite      whether tensors hold only finite values
    copy_rows     the KV cache's strided row copy      argmax      greedy's pick
    layer_norm    LayerNorm(x + y)                     int8_rows   int8 matmuls' quantize and rescale passes
    flash_triton  FlashAttention in Triton (the kernel) flash      its launches, autograd Function, CPU interpreter

Triton is an extra (`attnlab[kernels]`): `flash` imports it on first use, so importing attnlab never needs it.
The package imports nothing else of attnlab: attention, models, decoding and utils' int8 layers call it.
(`csrc/int8_step.c` is int8's fused decoding step, whose wrapper is `attnlab.models.int8_step`.)
"""

from .argmax import argmax_rows, pick
from .copy_rows import copy_rows
from .few_queries import few_queries_attention, native_few_queries
from .finite import all_finite
from .int8_rows import int8_linear, quantize_rows
from .layer_norm import add_layer_norm, native_layer_norm
from .loader import KERNELS, active, off, status
from .switches import Switch, fingerprint, native_enabled

__all__ = [
    "KERNELS",
    "Switch",
    "active",
    "add_layer_norm",
    "all_finite",
    "argmax_rows",
    "copy_rows",
    "few_queries_attention",
    "fingerprint",
    "int8_linear",
    "native_enabled",
    "native_few_queries",
    "native_layer_norm",
    "off",
    "pick",
    "quantize_rows",
    "status",
]
