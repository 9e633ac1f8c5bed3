"""The run folder on disk: its layout, config.json, checkpoints, weights, load_translator, and the one guard
for every output attnlab writes (outputs).

The face names what a user of a run calls: loading it, its decoding defaults, its weights and checkpoints,
and the files it holds; the trainer's and the output guard's helpers stay in their modules."""

from .checkpoints import average_checkpoints, list_checkpoints, save_checkpoint
from .config import read_run_config
from .generation import generation_values, read_generation, write_generation
from .layout import CONFIG_FILE, GENERATION_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE
from .loading import load_model, load_translator, open_translator
from .weights import load_weights, save_weights

__all__ = [
    "load_translator",
    "load_model",
    "open_translator",
    "read_run_config",
    "read_generation",
    "write_generation",
    "generation_values",
    "save_weights",
    "load_weights",
    "save_checkpoint",
    "list_checkpoints",
    "average_checkpoints",
    "CONFIG_FILE",
    "GENERATION_FILE",
    "WEIGHTS_FILE",
    "SRC_VOCAB_FILE",
    "TGT_VOCAB_FILE",
]
