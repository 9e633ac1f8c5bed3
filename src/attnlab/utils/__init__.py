"""Building blocks below every other package: atomic files and JSON (files), one message shape for range and
type errors (checks), seeds, threads, devices and the machine's memory (runtime), and the optional
extras each command needs (extras). What a loaded model runs on is `attnlab.inference`.
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
]
