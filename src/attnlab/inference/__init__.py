"""What a loaded model runs on: the precision choice and the conversion to it, packed and int8 linear
layers, int8's fused decoding step, and the worker processes decoding and `prepare` share out work on.

    precision   CPU features, the `--precision auto` rule, `decoding_model(model, precision)` (the conversion)
    packed      fp32 linear layers on weights reordered once for oneDNN (how fp32 decodes on the CPU)
    quantize    int8 linear layers: per-channel weight scales, per-row activations on `torch._int_mm`, or fbgemm
    int8_step   int8's fused greedy/beam step over a covered decoder (its passes: `attnlab.kernels.int8_step`)
    pool        `WorkerPool`: processes forked once and kept, sharing out a map with this one

The package sits on `attnlab.kernels` (whose C passes int8 runs) and under everything that holds a model:
attention's projections pack, models hand their decoder to the fused step, decoding and data run the pool.
"""

from .int8_step import Int8DecoderStep
from .packed import PackedLinear, pack_linears
from .pool import WorkerPool, can_fork
from .precision import (
    DECODE_PRECISIONS,
    INT8_KEEP_FP32,
    NATIVE_BF16_FLAGS,
    TRAIN_PRECISIONS,
    PrecisionChoice,
    autocast,
    bf16_attention,
    cpu_features,
    decoding_model,
    int8_layers,
    native_bf16,
    prepare_for_inference,
    resolve_precision,
)
from .quantize import INT8_KERNELS, Int8Linear, quantize_linears

__all__ = [
    "DECODE_PRECISIONS",
    "INT8_KEEP_FP32",
    "INT8_KERNELS",
    "NATIVE_BF16_FLAGS",
    "TRAIN_PRECISIONS",
    "Int8DecoderStep",
    "Int8Linear",
    "PackedLinear",
    "PrecisionChoice",
    "WorkerPool",
    "autocast",
    "bf16_attention",
    "can_fork",
    "cpu_features",
    "decoding_model",
    "int8_layers",
    "native_bf16",
    "pack_linears",
    "prepare_for_inference",
    "quantize_linears",
    "resolve_precision",
]
