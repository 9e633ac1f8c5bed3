"""Whether a model can be trained here, from its config, before it is built: `check_fits` counts its
parameters on the meta device (shapes only, no memory: as `load_translator` and `import hf` check a
config against its weights) and estimates what training holds at once — weights, gradients and Adam's
two moments (16 bytes a parameter in float32) plus one batch's activations — against the memory of the
device it trains on. A model that cannot fit is one line naming the size to lower, before any
allocation.

Building even a meta-device model takes time per module and per table row, so
`attnlab.runs.weights.check_config_size` first
bounds the weights and buffers from the config's numbers alone (layers, widths, vocabularies, position
tables): a config asking for 100,000 layers or a billion positions is one line at once, for training
(`check_fits`), loading a run (`attnlab.runs.loading`) and importing a model (`attnlab.export.marian`).
The memory compared with is the machine's (`attnlab.utils.machine.memory_bytes`: physical, cgroup and
the process's address-space limit, `ulimit -v`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from attnlab.models import CONFIGS, TRANSLATORS, build_model
from attnlab.runs.weights import check_config_size
from attnlab.training.config import TrainConfig
from attnlab.utils.machine import memory_bytes
from attnlab.utils.runtime import resolve_device

__all__ = ["PER_PARAMETER", "check_fits", "training_bytes"]

PER_PARAMETER = 16  # bytes: float32 weight, gradient, Adam's first and second moments
SIZES = (
    "num_hiddens",
    "ffn_num_hiddens",
    "num_layers",
    "decoder_layers",
    "embed_size",
    "max_len",
)  # a message names one


def parameters(model_type: str, model_config: Mapping[str, Any]) -> int:
    """Parameters of the model `model_config` describes, counted on the meta device (no memory)."""
    with torch.device("meta"):
        model = build_model(model_type, dict(model_config))
    return sum(p.numel() for p in model.parameters())


def training_bytes(model_type: str, model_config: Mapping[str, Any], train: TrainConfig) -> tuple[int, int]:
    """(parameters, bytes training holds at once): PER_PARAMETER per parameter, plus a batch's activations
    kept for the backward pass (per token and layer: the FFN's inner width, ~12 model widths and the
    attention weights of each head over the batch's sequence length; per token the target vocabulary's
    logits, their softmax and gradient)."""
    P = parameters(model_type, model_config)
    with torch.device("meta"):  # the position tables are buffers: memory all the same
        P += sum(b.numel() for b in build_model(model_type, dict(model_config)).buffers())
    cfg = CONFIGS[model_type].from_dict(dict(model_config))
    D = int(getattr(cfg, "num_hiddens", 1))
    F = int(getattr(cfg, "ffn_num_hiddens", 3 * D))
    H = int(getattr(cfg, "num_heads", 1))
    layers = int(getattr(cfg, "num_layers", 1))
    N = layers + int(getattr(cfg, "decoder_depth", layers))  # encoder + decoder (a decoder-only stack counts alike)
    V = int(getattr(cfg, "tgt_vocab_size", 1))
    L = train.num_steps or min(int(getattr(cfg, "max_len", 64) or 64), 64)  # a batch's sequence length
    tokens = train.batch_tokens or (train.batch_size or 1) * L
    activations = tokens * (N * (F + 12 * D + H * L) + 3 * V) * 4
    return P, P * PER_PARAMETER + activations


def device_memory(device: str) -> int | None:
    """Bytes the training device holds: a CUDA device's memory, else this machine's (None: unknown)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).total_memory)
    return memory_bytes() if dev.type == "cpu" else None


def check_fits(model_type: str, model_config: Mapping[str, Any], train: TrainConfig) -> None:
    """ValueError (one line) when training this model cannot fit the device's memory; see the module."""
    available = device_memory(train.device)
    if available is None or model_type not in TRANSLATORS:  # the translators' sizes are the open-ended ones
        return
    check_config_size(model_config, PER_PARAMETER, f"this {model_type}", available)  # before building
    P, need = training_bytes(model_type, model_config, train)
    if need <= available:
        return
    defaults = CONFIGS[model_type].from_dict({"src_vocab_size": 1, "tgt_vocab_size": 1})
    # decoder_layers' default (None) means as many as num_layers: compared with num_layers' default
    default = {k: getattr(defaults, "decoder_depth" if k == "decoder_layers" else k, None) for k in SIZES}
    ints = {k: v for k, v in default.items() if isinstance(v, int)}
    ratios = {k: model_config[k] / max(1, ints[k]) for k in SIZES if isinstance(model_config.get(k), int) and k in ints}
    worst = max(ratios, key=lambda k: ratios[k], default=None)
    advice = "choose a smaller model"
    if worst is not None:
        advice = f"lower model.{worst} ({model_config[worst]:,}; the default is {default[worst]:,})"
    where = "this machine" if resolve_device(train.device).type == "cpu" else f"device {train.device}"
    raise ValueError(
        f"this {model_type} needs about {_size(need)} to train ({P:,} parameters at {PER_PARAMETER} bytes each "
        f"for weights, gradients and Adam's moments, plus a batch's activations) but {where} has "
        f"{_size(available)}; {advice}"
    )


def _size(n: float) -> str:
    for unit, scale in (("PB", 2**50), ("TB", 2**40), ("GB", 2**30)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 2**20:,.0f} MB"
