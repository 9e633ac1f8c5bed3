"""Whether a model can be trained here, from its config, before it is built: `check_fits` counts its
parameters on the meta device (shapes only, no memory: as `load_translator` and `import hf` check a
config against its weights) and estimates what training holds at once — weights, gradients and Adam's
two moments (16 bytes a parameter in float32) plus one batch's activations — against the memory of the
device it trains on. A model that cannot fit is one line naming the size to lower, before any
allocation.

Building even a meta-device model takes time per module and per table row, so the weights and buffers
are first bounded from the config's numbers alone (`attnlab.runs.weights.config_floats`: layers, widths,
vocabularies, position tables): a config asking for 100,000 layers or a billion positions is one line at
once, here as when loading a run (`attnlab.runs.loading`) or importing a model (`attnlab.export.marian`),
through `attnlab.runs.weights.check_config_size`. The position tables are buffers, not parameters: the
exact count adds them.
The memory compared with is the machine's (`attnlab.utils.runtime.memory_bytes`: physical, cgroup and
the process's address-space limit, `ulimit -v`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from attnlab.models import CONFIGS, TRANSLATORS, build_model
from attnlab.runs.weights import config_floats, size_advice, size_text
from attnlab.training.config import TrainConfig
from attnlab.utils.runtime import memory_bytes, resolve_device

__all__ = ["PER_PARAMETER", "check_fits", "training_bytes"]

PER_PARAMETER = 16  # bytes: float32 weight, gradient, Adam's first and second moments


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
    where = "this machine" if resolve_device(train.device).type == "cpu" else f"device {train.device}"
    # The config's numbers first: building even on the meta device takes time per layer and table row.
    least = config_floats(model_config) * PER_PARAMETER
    if least > available:
        raise ValueError(
            f"this {model_type} needs at least {size_text(least)} to train ({least // PER_PARAMETER:,} weights at "
            f"{PER_PARAMETER} bytes each for weights, gradients and Adam's moments) but {where} has "
            f"{size_text(available)}; {size_advice(model_type, model_config)}"
        )
    P, need = training_bytes(model_type, model_config, train)
    if need <= available:
        return
    advice = size_advice(model_type, model_config)
    if need - P * PER_PARAMETER > P * PER_PARAMETER:  # the batch's activations, not the model, are most of it
        batch = ("batch_tokens", train.batch_tokens) if train.batch_tokens else ("batch_size", train.batch_size)
        advice = f"lower train.{batch[0]} ({batch[1]:,}: a batch's activations are most of it)"
    raise ValueError(
        f"this {model_type} needs about {size_text(need)} to train ({P:,} parameters at {PER_PARAMETER} bytes each "
        f"for weights, gradients and Adam's moments, plus a batch's activations) but {where} has "
        f"{size_text(available)}; {advice}"
    )
