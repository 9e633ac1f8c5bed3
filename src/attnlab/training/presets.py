"""Named training recipes: model + train + data settings in one dict; CLI flags override any field.

    get_preset("transformer", "d2l") -> {"model": {...}, "train": {...}, "data": {...}}

- `d2l`: the book's small runs (section "Sequence to Sequence Learning" / "The Transformer
  Architecture"): the first 600 pairs, all of them for training, fixed (64, 10) batches, Adam at a
  constant 0.005, gradient clipping 1. The four test sentences are among the training pairs, as in
  the book.
- `cpu-small`: the demo's Transformer: the best we measured for 4 minutes on 2 CPU cores (short pairs).
- `laptop`: the best English→French Transformer we measured for 10 minutes on 2 CPU cores, on the
  whole corpus up to 12 words (chosen on the validation split; see BENCHMARKS.md).
- `gpu`: an English→French Transformer-base for five minutes of one GPU (chosen from published recipes, not
  yet searched on a GPU: see its comment).
- `tiny`: seconds-long runs for tests.

Without a preset name each model gets its own default (`DEFAULT_PRESET`). A saved config.json (a run's, or
what `attnlab train --print-config` printed) is a starting point too: `load_config_file`; `resolved_config`
is what such a file holds.

`model` lacks the vocabulary sizes: the trainer fills them from the data.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from attnlab import __version__
from attnlab.models import CONFIGS
from attnlab.utils.files import read_json_object

# The book's training loop for both of its seq2seq models (fixed (64, 10) batches, Adam at a constant
# 0.005, clipping 1) and its data (the first 600 pairs); only the epochs differ. get_preset deep-copies.
_D2L_TRAIN = {
    "batch_size": 64,
    "batch_tokens": None,
    "num_steps": 10,
    "lr": 0.005,
    "schedule": "constant",
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "grad_clip": 1.0,
    "label_smoothing": 0.0,
    "log_every": 10,
}
_D2L_DATA = {"loader": "d2l", "num_examples": 600, "min_freq": 2}
# Seconds-long test runs: 300 pairs of up to 8 words, 10% each for validation and test.
_TINY_DATA = {
    "loader": "translation",
    "num_examples": 300,
    "max_len": 8,
    "min_freq": 1,
    "valid_fraction": 0.1,
    "test_fraction": 0.1,
}

PRESETS: dict[str, dict[str, dict]] = {
    "transformer": {
        "d2l": {
            # The book's bias=False projections, post-norm, sinusoidal positions.
            "model": {
                "num_hiddens": 32,
                "num_layers": 2,
                "num_heads": 4,
                "ffn_num_hiddens": 64,
                "dropout": 0.1,
                "bias": False,
            },
            # One thread: the same floats whatever the machine's core count, so the demo, `attnlab train`
            # and the tests get one model (LayerNorm's backward sums differ by thread count, and 2,000
            # steps amplify it: seed 0 gave 3/4 of the book's sentences at 2 threads, 4/4 at 1; BENCHMARKS.md).
            "train": {**_D2L_TRAIN, "epochs": 200, "threads": 1},
            "data": _D2L_DATA,
        },
        "cpu-small": {
            # Chosen by experiment (BENCHMARKS.md, "cpu-small preset: the experiment"): on 2 CPU cores the
            # output softmax dominates, so short pairs (<= 6 words) and min_freq 5 keep the target
            # vocabulary at ~3.8k; small batches, a short warmup and no dropout let 240 s reach ~1100
            # steps (3+ epochs). The only setting measured to translate all four book sentences at 1.000.
            "model": {"num_hiddens": 128, "num_layers": 2, "num_heads": 4, "ffn_num_hiddens": 256, "dropout": 0.0},
            "train": {
                "epochs": 100,
                "time_budget": 240,
                "batch_tokens": 1024,
                "lr": 2e-3,
                "schedule": "inverse_sqrt",
                "warmup_steps": 50,
                "label_smoothing": 0.1,
                "grad_clip": 1.0,
                "eval_limit": 500,
                "checkpoint_every": 200,
                "log_every": 20,
            },
            "data": {
                "loader": "translation",
                "max_len": 6,
                "min_freq": 5,
                "valid_fraction": 0.01,
                "test_fraction": 0.01,
            },
        },
        "laptop": {
            # Chosen on the validation split only (BENCHMARKS.md, "Time to quality": how `laptop` was
            # chosen): of the precisions, schedules, shapes and averaging tried for 600 s each, this one
            # reached the best multi-reference validation BLEU on 3-10-word sources. The whole corpus up
            # to 12 words, one joint BPE vocabulary of 4,000 with shared and tied embeddings (a small,
            # cheap softmax and no <unk>), small batches. A time-budgeted run depends on the machine
            # through its step count anyway, so it trains in the fastest precision the CPU computes
            # natively (`auto`: bf16 compute copy with fp32 masters where the units exist, else fp32);
            # decoding stays fp32 by default. The lr decays to zero exactly at the budget (`linear`), and
            # the final weights average the last three checkpoints.
            "model": {
                "num_hiddens": 192,
                "num_layers": 2,
                "num_heads": 4,
                "ffn_num_hiddens": 384,
                "dropout": 0.0,
                "share_embeddings": True,
            },
            "train": {
                "epochs": 100,
                "time_budget": 600,
                "batch_tokens": 1024,
                "lr": 2e-3,
                "schedule": "linear",
                "warmup_steps": 100,
                "label_smoothing": 0.1,
                "grad_clip": 1.0,
                "eval_limit": 500,
                "checkpoint_every": 500,
                "keep_last": 5,
                "average_last": 3,
                "precision": "auto",
                "log_every": 20,
            },
            "data": {
                "loader": "translation",
                "max_len": 12,
                "min_freq": 2,
                "tokenizer": "bpe",
                "bpe_vocab_size": 4000,
                "valid_fraction": 0.01,
                "test_fraction": 0.01,
            },
        },
        "gpu": {
            # Five minutes of one GPU (an H200) on the whole corpus up to 12 words. Not searched: no GPU was at
            # hand to search recipes on, so this is chosen from what is known and the one measured GPU run
            # (BENCHMARKS.md, "GPU"). Transformer-base in width (D 512, 8 heads, FFN 2048, 6+6 blocks) at the
            # corpus size of IWSLT'14 De-En (~160k pairs), whose published fairseq recipe regularises hard
            # (dropout 0.3, label smoothing 0.1, weight decay 1e-4): the measured run of this width without
            # regularisation saw its validation loss rise from step 1,000 on, with ~40 epochs in 5 minutes.
            # Pre-norm blocks, which train stably at lr 1e-3 with a short warmup; 32k-token batches (a GPU's
            # step is cheap to widen); the lr decays to zero at the budget and the last three checkpoints are
            # averaged, as `laptop` does. One joint BPE vocabulary of 8,000 with tied embeddings. bf16 autocast;
            # eager, not `compile`: the compilation of each new batch shape counts against the five minutes,
            # and `benchmarks/gpu/gpu.sh` measures what compile gains
            # (benchmarks/training/train_throughput.py --compile).
            "model": {
                "num_hiddens": 512,
                "num_layers": 6,
                "num_heads": 8,
                "ffn_num_hiddens": 2048,
                "dropout": 0.3,
                "norm_first": True,
                "share_embeddings": True,
            },
            "train": {
                "epochs": 1000,
                "time_budget": 300,
                "batch_tokens": 32768,
                "optimizer": "adamw",
                "weight_decay": 1e-4,
                "lr": 1e-3,
                "schedule": "linear",
                "warmup_steps": 400,
                "label_smoothing": 0.1,
                "grad_clip": 1.0,
                "eval_limit": 500,
                "checkpoint_every": 500,
                "keep_last": 5,
                "average_last": 3,
                "precision": "bf16",
                "log_every": 50,
            },
            "data": {
                "loader": "translation",
                "max_len": 12,
                "min_freq": 2,
                "tokenizer": "bpe",
                "bpe_vocab_size": 8000,
                "valid_fraction": 0.01,
                "test_fraction": 0.01,
            },
        },
        "tiny": {
            "model": {
                "num_hiddens": 32,
                "num_layers": 1,
                "num_heads": 2,
                "ffn_num_hiddens": 64,
                "dropout": 0.0,
                "max_len": 16,
            },  # a small position limit, so tests can exceed it cheaply
            "train": {
                "epochs": 2,
                "batch_tokens": 256,
                "lr": 5e-3,
                "schedule": "inverse_sqrt",
                "warmup_steps": 10,
                "eval_limit": 20,
                "log_every": 1,
            },
            "data": _TINY_DATA,
        },
    },
    "bahdanau": {
        "d2l": {
            "model": {"embed_size": 32, "num_hiddens": 32, "num_layers": 2, "dropout": 0.1},
            # One thread, as the Transformer's: a GRU this small gains nothing from a second, and on a shared
            # 2-core machine two threads that fight other processes run many times slower than one.
            "train": {**_D2L_TRAIN, "epochs": 250, "threads": 1},
            "data": _D2L_DATA,
        },
        "tiny": {
            "model": {"embed_size": 16, "num_hiddens": 16, "num_layers": 1, "dropout": 0.0},
            "train": {
                "epochs": 2,
                "batch_tokens": 256,
                "lr": 5e-3,
                "schedule": "constant",
                "eval_limit": 20,
                "log_every": 1,
            },
            "data": _TINY_DATA,
        },
    },
}


# The Vision Transformer on scikit-learn's 8x8 digits (16 patches of 2x2 + the class token), sized for
# 2 CPU cores; `digits` was chosen on the validation split (BENCHMARKS.md, "Vision Transformer").
PRESETS["vit"] = {
    "digits": {
        "model": {
            "patch_size": 2,
            "num_hiddens": 64,
            "num_heads": 4,
            "num_layers": 2,
            "ffn_num_hiddens": 128,
            "dropout": 0.1,
            "positions": "sinusoidal",
        },
        "train": {
            "epochs": 60,
            "batch_size": 64,
            "batch_tokens": None,
            "optimizer": "adamw",
            "weight_decay": 0.05,
            "lr": 2e-3,
            "schedule": "inverse_sqrt",
            "warmup_steps": 100,
            "label_smoothing": 0.1,
            "log_every": 20,
            "time_budget": 120,
            "threads": 1,  # small matmuls: one thread is as fast on 2 shared cores, and reproducible
        },
        "data": {"loader": "digits"},
    },
    "tiny": {
        "model": {"patch_size": 2, "num_hiddens": 32, "num_heads": 2, "num_layers": 1, "ffn_num_hiddens": 64},
        "train": {
            "epochs": 8,
            "batch_size": 64,
            "batch_tokens": None,
            "optimizer": "adamw",
            "lr": 3e-3,
            "schedule": "inverse_sqrt",
            "warmup_steps": 20,
            "log_every": 10,
            "threads": 1,
        },
        "data": {"loader": "digits"},
    },
}

# The decoder-only translator takes the Transformer's recipes with twice the blocks in its one stack:
# about the encoder–decoder's parameters (N encoder + N decoder blocks).
PRESETS["decoder-only"] = copy.deepcopy(PRESETS["transformer"])
for _spec in PRESETS["decoder-only"].values():
    _spec["model"]["num_layers"] *= 2
    for _key in ("positions", "position_options", "window"):  # options of the encoder–decoder only
        _spec["model"].pop(_key, None)

# The preset `attnlab train --model M` uses without --preset: each model's everyday recipe.
DEFAULT_PRESET = {"transformer": "cpu-small", "bahdanau": "d2l", "vit": "digits", "decoder-only": "cpu-small"}


def get_preset(model_type: str, name: str | None = None) -> dict:
    """A deep copy of a preset (so callers may override fields freely); None = the model's default."""
    if model_type not in PRESETS:
        raise ValueError(f"unknown model type {model_type!r}; expected one of {sorted(PRESETS)}")
    name = DEFAULT_PRESET[model_type] if name is None else name
    if name not in PRESETS[model_type]:
        raise ValueError(f"no preset {name!r} for {model_type}; available: {sorted(PRESETS[model_type])}")
    return copy.deepcopy(PRESETS[model_type][name])


# Keys of a saved config.json besides the three sections: what a run records about itself, ignored here.
_RECORDED = {"attnlab_version", "precision"}
_VOCAB_SIZES = ("src_vocab_size", "tgt_vocab_size")  # from the data, whatever a file says


def load_config_file(path: str | os.PathLike) -> tuple[str, dict]:
    """(model type, {"model", "train", "data"}) from a saved config.json: a preset read from a file."""
    cfg = read_json_object(path, "config")
    unknown = sorted(set(cfg) - {"model_type", "model", "train", "data"} - _RECORDED)
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown}; a config holds model_type, model, train and data")
    model_type = cfg.get("model_type")
    if model_type not in CONFIGS:
        raise ValueError(f"{path}: model_type must be one of {sorted(CONFIGS)}, got {model_type!r}")
    sections = {}
    for name in ("model", "train", "data"):
        section = cfg.get(name, {})
        if not isinstance(section, dict):
            raise ValueError(f"{path}: {name!r} must be a JSON object, got {type(section).__name__}")
        sections[name] = {k: v for k, v in section.items() if not (name == "model" and k in _VOCAB_SIZES)}
    return model_type, sections


def resolved_config(model_type: str, sections: Mapping[str, Mapping[str, Any]], train: Mapping[str, Any]) -> dict:
    """What a run of these settings records in its config.json, before the data is read: every model field
    (the vocabulary sizes aside), every train field (`train`: a TrainConfig's `to_dict()`), and the data
    settings with the split's seed as `train_run` fills it in."""
    model = CONFIGS[model_type].from_dict({"src_vocab_size": 1, "tgt_vocab_size": 1, **sections["model"]}).to_dict()
    data = dict(sections["data"])
    if data.get("loader", "translation") == "translation":
        data.setdefault("seed", train["seed"])  # as train_run does: the split follows --seed unless fixed
    return {
        "model_type": model_type,
        "model": {k: v for k, v in model.items() if k not in _VOCAB_SIZES},
        "train": dict(train),
        "data": data,
        "attnlab_version": __version__,
    }


__all__ = ["PRESETS", "DEFAULT_PRESET", "get_preset", "load_config_file", "resolved_config"]
