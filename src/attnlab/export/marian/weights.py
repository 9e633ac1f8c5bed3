"""Marian weights: the map from attnlab's modules to Marian's tensor names, shared by import and export,
and the weights file of a saved MarianMTModel (model.safetensors or pytorch_model.bin), read for
`attnlab.export.marian.importer.import_hf`: tensor shapes without the data first (the safetensors header, a
memory-mapped .bin), so a config can be checked before anything is allocated; then the tensors.
A pickle is never executed (`torch.load(weights_only=True)`), and a damaged or hostile file is one
ValueError naming it and what to do.
"""

from __future__ import annotations

import math
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor, nn

if TYPE_CHECKING:
    from attnlab.models import Transformer


def weights_file(source: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (source / name).is_file():
            return source / name
    raise FileNotFoundError(
        f"{source} holds neither model.safetensors nor pytorch_model.bin; pass the folder "
        f"written by MarianMTModel.save_pretrained (or `huggingface-cli download`)"
    )


def _damaged(path: Path, exc: BaseException) -> ValueError:
    fix = (
        "download the model again"
        if path.suffix == ".safetensors"
        else "save the model as model.safetensors (save_pretrained(..., safe_serialization=True)) and import that"
    )
    if isinstance(exc, pickle.UnpicklingError):
        return ValueError(
            f"{path} holds objects other than tensors, which attnlab never unpickles (they could run code); {fix}"
        )
    why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    return ValueError(f"{path} cannot be read as model weights ({type(exc).__name__}: {why}); {fix}")


def _load_bin(path: Path, mmap: bool) -> dict[str, Tensor]:
    # weights_only: a pickle that holds anything but tensors is refused, never executed.
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing the file
            warnings.simplefilter("ignore", UserWarning)
            try:
                weights = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError as exc:
                if not mmap or "mmap" not in str(exc):
                    raise
                weights = torch.load(path, map_location="cpu", weights_only=True)  # the pre-zip format
    except Exception as exc:
        raise _damaged(path, exc) from exc
    if not isinstance(weights, dict) or not all(isinstance(v, Tensor) for v in weights.values()):
        raise _damaged(path, TypeError("it holds no {name: tensor} state dict"))
    return weights


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of a weights file without reading its data (safetensors header, memory-mapped .bin)."""
    if path.suffix == ".safetensors":
        try:
            with safe_open(str(path), framework="pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (not a dict)
        except (SafetensorError, OSError, ValueError) as exc:
            raise _damaged(path, exc) from exc
    return {k: tuple(v.shape) for k, v in _load_bin(path, mmap=True).items()}


def read_hf_weights(path: Path) -> dict[str, Tensor]:
    if path.suffix == ".safetensors":
        try:
            return load_file(path)
        except (SafetensorError, OSError, ValueError) as exc:
            raise _damaged(path, exc) from exc
    return _load_bin(path, mmap=False)


def _layer_norms(block: nn.Module) -> list[nn.LayerNorm]:
    # In registration order, which is the order a block applies them (attention, [cross], FFN).
    return [m for m in block.modules() if isinstance(m, nn.LayerNorm)]


def weight_map(model) -> list[tuple[str, Tensor, int | None]]:
    """(Marian key, attnlab tensor, index of its hidden (D) axis or None) for every weight of `model`."""
    out: list[tuple[str, Tensor, int | None]] = []

    def linear(key: str, lin: nn.Linear, reads_hidden: bool, writes_hidden: bool):
        out.append((f"{key}.weight", lin.weight, 1 if reads_hidden else 0 if writes_hidden else None))
        if lin.bias is not None:
            out.append((f"{key}.bias", lin.bias, 0 if writes_hidden else None))

    def attention(key: str, mha):
        for hf_name, mod in (("q_proj", mha.W_q), ("k_proj", mha.W_k), ("v_proj", mha.W_v)):
            linear(f"{key}.{hf_name}", mod, True, False)
        linear(f"{key}.out_proj", mha.W_o, False, True)

    def norm(key: str, ln: nn.LayerNorm):
        out.extend([(f"{key}.weight", ln.weight, 0), (f"{key}.bias", ln.bias, 0)])

    def ffn(key: str, f):
        linear(f"{key}.fc1", f.dense1, True, False)
        linear(f"{key}.fc2", f.dense2, False, True)

    enc, dec = model.encoder, model.decoder
    out.append(("model.encoder.embed_tokens.weight", enc.embedding.weight, 1))
    out.append(("model.decoder.embed_tokens.weight", dec.embedding.weight, 1))
    for i, b in enumerate(enc.blocks):
        k = f"model.encoder.layers.{i}"
        attention(f"{k}.self_attn", b.attention)
        ffn(k, b.ffn)
        for name, ln in zip(("self_attn_layer_norm", "final_layer_norm"), _layer_norms(b), strict=True):
            norm(f"{k}.{name}", ln)
    for i, b in enumerate(dec.blocks):
        k = f"model.decoder.layers.{i}"
        attention(f"{k}.self_attn", b.self_attention)
        attention(f"{k}.encoder_attn", b.cross_attention)
        ffn(k, b.ffn)
        names = ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")
        for name, ln in zip(names, _layer_norms(b), strict=True):
            norm(f"{k}.{name}", ln)
    out.append(("lm_head.weight", dec.dense.weight, 1))
    return out


def _lookup(table: Mapping[str, Any], *keys: str):
    for k in keys:
        for cand in (k, k.removeprefix("model.")):
            if cand in table:
                return table[cand]
    raise ValueError(f"the Marian weights lack {keys[0]!r}; the folder is not a complete MarianMTModel")


def stored(table: Mapping[str, Any], key: str):
    """The entry of `table` holding Marian tensor `key`, under its own name or where tied weights keep it."""
    return _lookup(table, key, *_SOURCES.get(key, ()))


# Where a Marian tensor may be stored under another name (tied embeddings are saved once).
_SHARED = ("model.shared.weight",)
_SOURCES = {
    "model.encoder.embed_tokens.weight": _SHARED,
    "model.decoder.embed_tokens.weight": _SHARED,
    "lm_head.weight": ("model.decoder.embed_tokens.weight", "model.shared.weight"),
}


def check_header(config: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]], path: Path) -> None:
    """The config's layer counts, width and vocabulary against the weights file's header alone, before any
    model is built (even on the meta device, 100,000 layers take minutes): one line at the first mismatch."""
    depth = {"encoder": config["num_layers"], "decoder": config.get("decoder_layers") or config["num_layers"]}
    for side, n in depth.items():
        found = {int(m.group(1)) for k in shapes if (m := re.match(rf"(?:model\.)?{side}\.layers\.(\d+)\.", k))}
        if len(found) != n:
            name = "encoder_layers" if side == "encoder" else "decoder_layers"
            raise ValueError(
                f"{path.parent / 'config.json'} says {name}={n} but {path} holds {len(found)} {side} layers; "
                "the folder's files disagree — download the model again"
            )
    embed = shapes.get("model.shared.weight") or shapes.get("model.encoder.embed_tokens.weight")
    if embed is not None and len(embed) == 2 and embed[1] != config["num_hiddens"]:
        raise ValueError(
            f"{path.parent / 'config.json'} says d_model={config['num_hiddens']} but {path}'s embeddings are "
            f"{embed[1]} wide; the folder's files disagree — download the model again"
        )


def check_shapes(skeleton: Transformer, shapes: Mapping[str, tuple[int, ...]], path: Path) -> None:
    """Every tensor `skeleton` (a meta-device model: no memory) needs, against the weights file's shapes."""
    for key, tensor, _ in weight_map(skeleton):
        shape = stored(shapes, key)
        if tuple(shape) != tuple(tensor.shape):
            raise ValueError(
                f"Marian tensor {key} in {path} has shape {tuple(shape)}, {path.parent / 'config.json'} "
                f"implies {tuple(tensor.shape)}; the folder's files disagree — download the model again"
            )
    c = skeleton.config
    for side, depth in (("encoder", c.num_layers), ("decoder", c.decoder_depth)):  # no layer left unread
        first_extra = f"model.{side}.layers.{depth}."
        if any(k.startswith((first_extra, first_extra.removeprefix("model."))) for k in shapes):
            raise ValueError(
                f"{path} holds more {side} layers than {side}_layers={depth} in {path.parent / 'config.json'}; "
                f"the folder's files disagree — download the model again"
            )
    bias = shapes.get("final_logits_bias")
    V = skeleton.config.tgt_vocab_size
    if bias is not None and math.prod(bias) != V:
        raise ValueError(f"final_logits_bias in {path} has shape {tuple(bias)}, the model's vocabulary {V} tokens")


__all__ = ["check_header", "check_shapes", "read_hf_weights", "stored", "weight_map", "weight_shapes", "weights_file"]
