"""Building blocks below every other package but `attnlab.kernels` (whose C passes int8's layers run): atomic
files and JSON (files), one message shape for range and type errors (checks), seeds, threads and devices
(runtime), numeric precision and preparing a model to decode in it (precision; int8 layers in quantize), and the
optional extras each command needs (extras).
"""

from .checks import SEED_MAX, check_field_types, check_range, check_seed
from .extras import EXTRAS, missing_modules, require
from .files import (
    append_jsonl,
    atomic_dir,
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
    json_safe,
    read_json,
    read_json_object,
    write_json,
)
from .precision import (
    DECODE_PRECISIONS,
    INT8_KEEP_FP32,
    NATIVE_BF16_FLAGS,
    TRAIN_PRECISIONS,
    PrecisionChoice,
    autocast,
    bf16_attention,
    cpu_features,
    int8_layers,
    native_bf16,
    prepare_for_inference,
    resolve_precision,
)
from .runtime import (
    check_nproc,
    distributed_info,
    init_distributed,
    interactive,
    intra_op_threads,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
)

__all__ = [
    "EXTRAS",
    "missing_modules",
    "require",
    "atomic_path",
    "atomic_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "write_json",
    "read_json",
    "json_safe",
    "append_jsonl",
    "read_json_object",
    "check_field_types",
    "SEED_MAX",
    "check_range",
    "check_seed",
    "seed_everything",
    "rng_state",
    "set_rng_state",
    "intra_op_threads",
    "check_nproc",
    "distributed_info",
    "init_distributed",
    "resolve_device",
    "interactive",
    "TRAIN_PRECISIONS",
    "DECODE_PRECISIONS",
    "NATIVE_BF16_FLAGS",
    "INT8_KEEP_FP32",
    "PrecisionChoice",
    "cpu_features",
    "native_bf16",
    "resolve_precision",
    "autocast",
    "bf16_attention",
    "int8_layers",
    "prepare_for_inference",
]
