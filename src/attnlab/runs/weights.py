"""Model weights as safetensors: atomic saves carrying the model config in the metadata, and checks of
a weights file against a model (tensor names, shapes, saved config) before anything is allocated."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_model
from torch import Tensor, nn

from attnlab.kernels.finite import all_finite
from attnlab.models import CONFIGS
from attnlab.utils.files import atomic_path, loads_json
from attnlab.utils.runtime import memory_bytes

CONFIG_METADATA = "attnlab_model_config"  # safetensors metadata key: the model config, as JSON


def save_weights(model: nn.Module, path: str | os.PathLike) -> None:
    """safetensors, atomically; tied parameters (shared embeddings) are stored once. The model's config
    goes into the file's metadata, so loading can tell a config edited after training (e.g. num_heads,
    which changes no tensor shape) from the one the weights were trained with."""
    with atomic_path(Path(path)) as tmp:
        save_model(model, tmp, metadata=weights_metadata(model))


def weights_metadata(model: nn.Module) -> dict[str, str] | None:
    """The safetensors metadata `save_weights` gives `model`'s weights: its config as JSON (None without one)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        return {CONFIG_METADATA: json.dumps(config.to_dict(), sort_keys=True)}
    return None


def read_weights(path: str | os.PathLike) -> dict[str, Tensor]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the weights file {path.name} was not found in {path.parent}")
    return load_file(path)


def read_header(path: str | os.PathLike) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """Tensor shapes and metadata of a safetensors file, read from its header only (no tensor data)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the weights file {path.name} was not found in {path.parent}")
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (not a dict)
            return shapes, dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as exc:
        raise ValueError(
            f"{path} is not a readable safetensors file ({exc}); the file is damaged or not attnlab weights"
        ) from exc


def check_weights(
    model: nn.Module, path: str | os.PathLike, what: str = "the config", config: dict | None = None
) -> None:
    """Compare the tensor names and shapes `model` expects with the header of the weights file, and the
    config the weights were saved with (metadata) with `config`, before any tensor is read.

    `model` may live on the meta device (no memory): only names and shapes are used. Tied parameters
    (shared embeddings) are stored under one of their names. Raises one ValueError naming the first
    differing tensors or config keys.
    """
    shapes, metadata = read_header(path)
    groups: dict[int, tuple[list[str], tuple[int, ...]]] = {}  # one entry per distinct tensor
    for name, t in list(model.named_parameters(remove_duplicate=False)) + [
        (n, b) for n, b in model.state_dict(keep_vars=True).items() if not isinstance(b, nn.Parameter)
    ]:
        groups.setdefault(id(t), ([], tuple(t.shape)))[0].append(name)
    known = {n for names, _ in groups.values() for n in names}
    missing, wrong = [], []
    for names, shape in groups.values():
        present = [n for n in names if n in shapes]
        if not present:
            missing.append(names[0])
        elif shapes[present[0]] != shape:
            wrong.append(f"{present[0]} has shape {shapes[present[0]]} but the model expects {shape}")
    unexpected = [k for k in shapes if k not in known]
    if missing or wrong or unexpected:
        parts = (
            ([f"shape mismatch: {'; '.join(wrong[:3])}"] if wrong else [])
            + ([f"missing tensors: {', '.join(missing[:5])}"] if missing else [])
            + ([f"unexpected tensors: {', '.join(unexpected[:5])}"] if unexpected else [])
        )
        raise ValueError(
            f"{path} does not match the model built from {what} ({'; '.join(parts)}); the "
            f"weights and the config/vocabularies come from different runs — load them from the "
            f"same run folder"
        )
    if config is not None and CONFIG_METADATA in metadata:
        try:
            saved = loads_json(metadata[CONFIG_METADATA], f"{path}'s metadata", "weights")
        except ValueError:
            saved = {}
        saved = saved if isinstance(saved, dict) else {}
        # Dropout does not change what trained weights compute; every other key does.
        differ = [k for k in sorted(set(saved) & set(config)) if k != "dropout" and saved[k] != config[k]]
        if differ:
            k = differ[0]
            raise ValueError(
                f"{what} says {k}={config[k]!r} but {path} was saved with {k}={saved[k]!r}"
                f"{' (and ' + ', '.join(differ[1:]) + ')' if differ[1:] else ''}; the weights "
                f"only compute what they were trained for: restore the run's config.json"
            )


def load_weights(
    model: nn.Module, path: str | os.PathLike, what: str = "the config", config: dict | None = None
) -> None:
    """Load safetensors weights into `model`, checking names and shapes (and, given `config`, the
    config saved with the weights) first, so a mismatch is one error naming the first differing
    tensors rather than a bare RuntimeError deep in load_state_dict."""
    check_weights(model, path, what, config)
    missing, unexpected = load_model(model, path, strict=False)
    if missing or unexpected:  # check_weights saw the same names: this is a safety net
        raise ValueError(
            f"{path} does not match the model built from {what}: missing tensors "
            f"{sorted(missing)[:5]}, unexpected tensors {sorted(unexpected)[:5]}"
        )
    check_finite(model.state_dict().items(), path)


def check_finite(tensors: Iterable[tuple[str, Tensor]], path: str | os.PathLike) -> None:
    """ValueError (one line) naming the first floating-point tensor that holds a NaN or an infinity: such a
    model translates every sentence to nothing (every score NaN), so it is refused at load and import.

    Examples:
        >>> check_finite([("a", torch.ones(2)), ("b", torch.tensor([1.0, float("nan")]))], "w.safetensors")
        Traceback (most recent call last):
        ...
        ValueError: w.safetensors: tensor b holds 1 NaN or infinite values of 2; the weights are damaged (a \
training run that diverged?): use an earlier checkpoint or train again
    """
    for name, t in tensors:
        if t.is_floating_point() and t.device.type != "meta" and not all_finite(t):
            bad = int((~torch.isfinite(t)).sum())
            raise ValueError(
                f"{path}: tensor {name} holds {bad} NaN or infinite values of {t.numel()}; the weights are "
                "damaged (a training run that diverged?): use an earlier checkpoint or train again"
            )


def config_values(model_config: Mapping[str, Any]) -> dict[str, int]:
    """The sizes that multiply a model's weights, from a model config: widths, layers, vocabularies and
    position-table rows (positive integers only; missing or odd values count as 1)."""

    def size(key: str, default: int = 1) -> int:
        v = model_config.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default

    D = size("num_hiddens")
    return {
        "num_hiddens": D,
        "ffn_num_hiddens": size("ffn_num_hiddens", 3 * D),
        "num_layers": size("num_layers"),
        "decoder_layers": size("decoder_layers", size("num_layers")),
        "embed_size": size("embed_size", D),
        "src_vocab_size": size("src_vocab_size"),
        "tgt_vocab_size": size("tgt_vocab_size"),
        "max_len": size("max_len"),
    }


SIZES = ("num_hiddens", "ffn_num_hiddens", "num_layers", "decoder_layers", "embed_size", "max_len")


def size_advice(model_type: str, model_config: Mapping[str, Any]) -> str:
    """What to lower first: the size of SIZES farthest above its default (a ratio), as "lower model.X (value;
    the default is D)", or "choose a smaller model"."""
    defaults = CONFIGS[model_type].from_dict({"src_vocab_size": 1, "tgt_vocab_size": 1})
    # decoder_layers' default (None) means as many as num_layers: compared with num_layers' default
    default = {k: getattr(defaults, "decoder_depth" if k == "decoder_layers" else k, None) for k in SIZES}
    ints = {k: v for k, v in default.items() if isinstance(v, int)}
    ratios = {
        k: model_config[k] / max(1, ints[k])
        for k in SIZES
        if isinstance(model_config.get(k), int) and not isinstance(model_config.get(k), bool) and k in ints
    }
    worst = max(ratios, key=lambda k: ratios[k], default=None)
    if worst is None:
        return "choose a smaller model"
    return f"lower model.{worst} ({model_config[worst]:,}; the default is {default[worst]:,})"


def size_text(n: float) -> str:
    """Bytes for a message: PB, TB, GB or MB."""
    for unit, scale in (("PB", 2**50), ("TB", 2**40), ("GB", 2**30)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 2**20:,.0f} MB"


def config_floats(model_config: Mapping[str, Any]) -> int:
    """A lower bound on the values a model of `model_config` holds: per block 4 D² of attention and 2 D F of
    FFN (a decoder block 4 D² more of cross-attention), the embeddings and output projection (vocabularies
    x D) and the position tables (max_len x D, one per stack). Exact counting needs the model built (on the
    meta device: time per layer and table row); this needs nothing.

    Examples:
        >>> config_floats({"num_hiddens": 32, "ffn_num_hiddens": 64, "num_layers": 2, "max_len": 10**9})
        64000041056
    """
    v = config_values(model_config)
    D, F, N, Nd = v["num_hiddens"], v["ffn_num_hiddens"], v["num_layers"], v["decoder_layers"]
    width = max(D, v["embed_size"])
    blocks = N * (4 * D * D + 2 * D * F) + Nd * (8 * D * D + 2 * D * F)
    return blocks + (v["src_vocab_size"] + 2 * v["tgt_vocab_size"]) * width + 2 * v["max_len"] * D


def check_config_size(
    model_type: str, model_config: Mapping[str, Any], bytes_per_value: int, what: str, available: int | None = None
) -> None:
    """ValueError (one line) when a model of `model_config`, at `bytes_per_value` bytes a value, cannot fit
    `available` bytes (default: `memory_bytes()`, which counts `ulimit -v`), judged from the config's
    numbers alone (`config_floats`) before anything is built. what: the config's name in the message."""
    available = memory_bytes() if available is None else available
    floats = config_floats(model_config)
    need = floats * bytes_per_value
    if available is None or need <= available or model_type not in CONFIGS:
        return
    raise ValueError(
        f"{what} describes a {model_type} of at least {size_text(need)} ({floats:,} values at {bytes_per_value} "
        f"bytes) but this machine lets a process use {size_text(available)}; {size_advice(model_type, model_config)}"
    )
