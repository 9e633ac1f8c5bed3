"""Write a run's Transformer as ONNX graphs in Optimum's seq2seq layout, for onnxruntime (Python, C++, web).

    attnlab export --format onnx --checkpoint runs/demo/transformer --out onnx-model [--quantization int8]

The folder holds:
- `encoder_model.onnx`: input_ids (B, S), attention_mask (B, S) -> last_hidden_state (B, S, D);
- `decoder_model.onnx`: input_ids (B, T), encoder_hidden_states (B, S, D), encoder_attention_mask (B, S)
  -> logits (B, T, V) and `present.{i}.decoder.key/.value`, `present.{i}.encoder.key/.value` (B, Hkv, L, Dh);
- `decoder_with_past_model.onnx`: input_ids (B, t), encoder_attention_mask and the cache as
  `past_key_values.{i}.decoder.key/.value`, `past_key_values.{i}.encoder.key/.value` -> logits and
  `present.{i}.decoder.key/.value`;
- every attention's weights as further outputs, fetched by name or left: `encoder_attentions.{i}`
  (B, H, S, S), `decoder_attentions.{i}` (B, H, T, past + T), `cross_attentions.{i}` (B, H, T, S);
- `src_vocab.json`, `tgt_vocab.json`: the run's vocabularies (attnlab's word JSON or the tokenizers JSON);
- `config.json`: special tokens and their ids, the decoder's start token, limits, heads per layer, the
  tokenizer's kind and the names above.

The source is attnlab's ids followed by `<eos>` (`attnlab.data.load_vocab(FOLDER / "src_vocab.json").encode(text)`
then the `<eos>` id); the target starts with the run's start token (`decoder_start_token_id`).
`--quantization int8`: onnxruntime's dynamic quantization of every MatMul's weights (int8 per tensor,
activations quantized at run time).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnlab.decoding.translator import MAX_LEN_A, MAX_LEN_B
from attnlab.export.onnx.graphs import DecoderGraph, DecoderWithPastGraph, EncoderGraph
from attnlab.runs.generation import generation_values
from attnlab.runs.layout import SRC_VOCAB_FILE, TGT_VOCAB_FILE
from attnlab.runs.loading import imported_source, load_translator
from attnlab.runs.outputs import Claim, claim_output, write_output
from attnlab.utils.files import atomic_write_text

QUANTIZATIONS = ("float32", "int8")
OPSET = 17
ENCODER, DECODER, DECODER_WITH_PAST = "encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"
CONFIG = "config.json"


def require_onnx():
    """(onnx, onnxruntime), or a one-line ValueError saying how to install them."""
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise ValueError(
            f"the onnx format needs the onnx and onnxruntime packages ({exc.name} is missing); "
            "install them with pip install 'attnlab[onnx]'"
        ) from None
    return onnx, onnxruntime


def check_exportable(model: Any) -> None:
    """ValueError (one line) when `model` has no ONNX graphs here: only the encoder–decoder Transformer
    does, with at least one head left in every attention."""
    model_type = getattr(model, "MODEL_TYPE", type(model).__name__)
    if model_type != "transformer":
        raise ValueError(
            f"ONNX export supports the encoder-decoder Transformer only, got a {model_type} model; "
            "decode it with attnlab instead"
        )
    for name, m in model.named_modules():
        if getattr(m, "num_heads", None) == 0:
            raise ValueError(
                f"{name} has every head pruned, which the ONNX graphs cannot hold; export the unpruned run"
            )


def io_names(num_layers: int, decoder_layers: int | None = None) -> dict[str, tuple[list[str], list[str]]]:
    """file -> (input names, output names), Optimum's seq2seq names plus the attention outputs: the encoder's
    per encoder block (`num_layers`), the decoders' caches and maps per decoder block (`decoder_layers`,
    None = as many)."""
    layers = range(num_layers if decoder_layers is None else decoder_layers)
    kv = [f"{side}.{w}" for side in ("decoder", "encoder") for w in ("key", "value")]
    present_all = [f"present.{i}.{x}" for i in layers for x in (kv[0], kv[1], kv[2], kv[3])]
    present_dec = [f"present.{i}.decoder.{w}" for i in layers for w in ("key", "value")]
    past = [f"past_key_values.{i}.{x}" for i in layers for x in (kv[0], kv[1], kv[2], kv[3])]
    self_w, cross_w = [f"decoder_attentions.{i}" for i in layers], [f"cross_attentions.{i}" for i in layers]
    return {
        ENCODER: (
            ["input_ids", "attention_mask"],
            ["last_hidden_state"] + [f"encoder_attentions.{i}" for i in range(num_layers)],
        ),
        DECODER: (
            ["input_ids", "encoder_hidden_states", "encoder_attention_mask"],
            ["logits", *present_all, *self_w, *cross_w],
        ),
        DECODER_WITH_PAST: (
            ["input_ids", "encoder_attention_mask", *past],
            ["logits", *present_dec, *self_w, *cross_w],
        ),
    }


def _axes(name: str) -> dict[int, str]:
    """The dynamic axes of a graph input or output, named as Optimum names them."""
    B, S, T, P = "batch_size", "encoder_sequence_length", "decoder_sequence_length", "past_decoder_sequence_length"
    if name in ("attention_mask", "encoder_attention_mask"):
        return {0: B, 1: S}
    if name in ("last_hidden_state", "encoder_hidden_states"):
        return {0: B, 1: S}
    if name.endswith(".encoder.key") or name.endswith(".encoder.value"):
        return {0: B, 2: S}
    if name.startswith("past_key_values"):
        return {0: B, 2: P}
    if name.startswith("present"):
        return {0: B, 2: "present_sequence_length"}
    if name.startswith("encoder_attentions"):
        return {0: B, 2: S, 3: S}
    if name.startswith("cross_attentions"):
        return {0: B, 2: T, 3: S}
    if name.startswith("decoder_attentions"):
        return {0: B, 2: T, 3: "present_sequence_length"}
    return {0: B, 1: T}  # input_ids, logits


def _trace(graph: nn.Module, args: tuple, path: Path, names: tuple[list[str], list[str]]) -> None:
    inputs, outputs = names
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(
            graph,
            args,
            str(path),
            dynamo=False,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={n: _axes(n) for n in inputs + outputs},
            opset_version=OPSET,
            do_constant_folding=True,
        )


def export_graphs(model: Any, out_dir: Path) -> None:
    """Trace the three graphs of `model` (an eval-mode attnlab Transformer) into out_dir."""
    check_exportable(model)
    c = model.config
    names = io_names(c.num_layers, c.decoder_depth)
    B, S, T = 2, 5, 3
    src = torch.full((B, S), 4, dtype=torch.long)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 3:] = 0
    tgt = torch.full((B, T), 4, dtype=torch.long)
    enc, dec, dec_past = EncoderGraph(model).eval(), DecoderGraph(model).eval(), DecoderWithPastGraph(model).eval()
    with torch.no_grad():
        memory = enc(src, mask)[0]
        first = dec(tgt, memory, mask)
    present = first[1 : 1 + 4 * c.decoder_depth]
    _trace(enc, (src, mask), out_dir / ENCODER, names[ENCODER])
    _trace(dec, (tgt, memory, mask), out_dir / DECODER, names[DECODER])
    _trace(dec_past, (tgt[:, :1], mask, *present), out_dir / DECODER_WITH_PAST, names[DECODER_WITH_PAST])


def quantize_int8(folder: Path) -> None:
    """Replace each graph in `folder` by onnxruntime's dynamic int8 quantization of it."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process applies to static (calibrated) quantization
    try:
        for name in (ENCODER, DECODER, DECODER_WITH_PAST):
            path = folder / name
            tmp = folder / f"{name}.int8"
            quantize_dynamic(str(path), str(tmp), weight_type=QuantType.QInt8)
            os.replace(tmp, path)
    finally:
        root.setLevel(level)


def origin(config: dict) -> str:
    """Where the run's model comes from, in words (the explorer's footer)."""
    imported = imported_source(config)
    if imported is not None:
        return f"imported from {imported}"
    path = (config.get("data") or {}).get("path")
    return "trained with attnlab" + (f" on {Path(str(path)).name}" if path else "")


def _token(vocab, index: int) -> dict:
    return {"id": int(index), "token": vocab.to_tokens(int(index))}


def onnx_config(translator, quantization: str) -> dict:
    """What config.json says: special tokens, start token, limits, heads and the file names."""
    model = translator.model
    c = model.config
    src, tgt = translator.src_vocab, translator.tgt_vocab
    kinds = model.attention_kinds()
    return {
        "format": "attnlab-onnx",
        "version": 1,
        "model_type": "transformer",
        "quantization": quantization,
        "d_model": c.num_hiddens,
        "num_layers": c.num_layers,  # encoder blocks
        "decoder_layers": c.decoder_depth,  # decoder blocks: the caches and maps the decoders take and give
        "heads": {k: [m.num_heads for m in ms] for k, ms in kinds.items()},
        "kv_heads": {k: [m.num_kv_heads for m in ms] for k, ms in kinds.items()},
        "head_dim": c.num_hiddens // c.num_heads,
        "positions": c.positions,
        "model": c.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "origin": origin(translator.config),
        "src_vocab_size": len(src),
        "tgt_vocab_size": len(tgt),
        "tokenizer": {"kind": src.kind, "style": getattr(src, "style", "book"), "lang": getattr(tgt, "lang", None)},
        "special_tokens": {
            "source": {"unk": _token(src, src.unk), "pad": _token(src, src.pad), "eos": _token(src, src.eos)},
            "target": {
                "unk": _token(tgt, tgt.unk),
                "pad": _token(tgt, tgt.pad),
                "bos": _token(tgt, tgt.bos),
                "eos": _token(tgt, tgt.eos),
            },
        },
        "decoder_start_token_id": int(translator.bos),
        "eos_token_id": int(tgt.eos),
        "pad_token_id": int(src.pad),
        "source_ends_with_eos": True,
        "suppress_tokens": list(c.suppress_tokens),
        "max_source_tokens": translator.max_len,  # <eos> included; null: no limit
        "max_output_tokens": translator.max_output_len,
        # the output limit: min(max_output_tokens, max_len_a * S + max_len_b), S the source tokens with <eos>
        "max_len_a": MAX_LEN_A,
        "max_len_b": MAX_LEN_B,
        "generation": generation_values(translator.defaults),  # the run's decoding defaults (generation.json)
        "max_target_positions": model.max_target_positions,
        "files": {
            name: {"inputs": i, "outputs": o} for name, (i, o) in io_names(c.num_layers, c.decoder_depth).items()
        },
    }


def claim_export(run_dir, out_dir, kind: str, quantization: str, weights, force: bool) -> tuple[Claim, Any]:
    """Everything an ONNX-based export checks before any work: the quantization, the output folder (claimed
    as `kind`), the onnx packages, and the run's model. Returns the claim and the run's translator."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown ONNX quantization {quantization!r}; expected one of {', '.join(QUANTIZATIONS)}")
    sources = [run_dir] + ([weights] if weights is not None else [])
    claim = claim_output(out_dir, kind, force=force, sources=sources)
    require_onnx()
    translator = load_translator(run_dir, weights=weights)
    check_exportable(translator.model)
    return claim, translator


def export(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    quantization: str = "float32",
    weights: str | os.PathLike | None = None,
    force: bool = False,
) -> Path:
    """Write the ONNX folder of the run `run_dir` to `out_dir` (built beside it, then renamed; `force`
    replaces an earlier ONNX export only)."""
    claim, translator = claim_export(run_dir, out_dir, "export-onnx", quantization, weights, force)
    note = {"source_run": str(Path(run_dir).resolve()), "quantization": quantization}
    with write_output(claim, note) as tmp:
        write_folder(translator, Path(run_dir), tmp, quantization)
    return claim.path


def write_folder(translator, run_dir: Path, folder: Path, quantization: str = "float32") -> None:
    """The graphs, vocabularies and config.json of `translator` (loaded from `run_dir`) into `folder`."""
    export_graphs(translator.model, folder)
    if quantization == "int8":
        quantize_int8(folder)
    for name in (SRC_VOCAB_FILE, TGT_VOCAB_FILE):
        shutil.copyfile(run_dir / name, folder / name)
    atomic_write_text(folder / CONFIG, json.dumps(onnx_config(translator, quantization), indent=1))


__all__ = [
    "claim_export",
    "CONFIG",
    "DECODER",
    "DECODER_WITH_PAST",
    "ENCODER",
    "QUANTIZATIONS",
    "check_exportable",
    "export",
    "export_graphs",
    "io_names",
    "onnx_config",
    "require_onnx",
    "write_folder",
]
