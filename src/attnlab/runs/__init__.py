"""The run folder on disk: its layout, config.json, checkpoints, weights, load_translator, and the one guard
for every output attnlab writes (outputs)."""

from .checkpoints import (
    average_checkpoints,
    checkpoint_dir,
    clean_temp_checkpoints,
    list_checkpoints,
    load_trainer_state,
    prune_checkpoints,
    save_checkpoint,
    save_tensors,
    verify_checkpoint,
)
from .config import read_run_config, record_choice, write_run_config
from .generation import read_generation, write_generation
from .layout import (
    CHECKPOINTS,
    CONFIG_FILE,
    DEFAULT_RUN,
    GENERATION_FILE,
    LOG_FILE,
    MANIFEST_FILE,
    MARKER_FILE,
    META_FILE,
    SRC_VOCAB_FILE,
    STATE_FILE,
    TGT_VOCAB_FILE,
    WEIGHTS_FILE,
)
from .loading import load_translator
from .outputs import (
    KINDS,
    claim_output,
    claim_output_file,
    output_kind,
    start_in_place,
    write_output,
    write_output_file,
)
from .weights import CONFIG_METADATA, check_weights, load_weights, read_header, read_weights, save_weights

__all__ = [
    "GENERATION_FILE",
    "read_generation",
    "write_generation",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "STATE_FILE",
    "META_FILE",
    "MANIFEST_FILE",
    "SRC_VOCAB_FILE",
    "TGT_VOCAB_FILE",
    "CHECKPOINTS",
    "LOG_FILE",
    "MARKER_FILE",
    "DEFAULT_RUN",
    "write_run_config",
    "read_run_config",
    "record_choice",
    "CONFIG_METADATA",
    "save_weights",
    "read_weights",
    "read_header",
    "check_weights",
    "load_weights",
    "checkpoint_dir",
    "save_checkpoint",
    "verify_checkpoint",
    "list_checkpoints",
    "clean_temp_checkpoints",
    "load_trainer_state",
    "prune_checkpoints",
    "average_checkpoints",
    "save_tensors",
    "load_translator",
    "KINDS",
    "claim_output",
    "claim_output_file",
    "output_kind",
    "start_in_place",
    "write_output",
    "write_output_file",
]
