"""Export an attnlab Transformer to CTranslate2 (its Python `specs` API), for its C++ decoder.

    attnlab export --checkpoint runs/demo/transformer --format ctranslate2 --out ct2 --quantization int8

    import ctranslate2
    from attnlab.export.ctranslate2 import source_tokens
    tr = ctranslate2.Translator("ct2", compute_type="int8")
    src_vocab = ...  # attnlab.data.load_vocab("runs/demo/transformer/src_vocab.json")
    out = tr.translate_batch([source_tokens(src_vocab, "he's calm .")], beam_size=1, min_decoding_length=0)
    print(" ".join(out[0].hypotheses[0]))

Pass `min_decoding_length=0`: attnlab allows an empty translation (<eos> first), CTranslate2's default (1)
does not, so without it a sentence attnlab leaves empty gets one token from CTranslate2.

What the export sets so that CTranslate2 decodes exactly as attnlab does:
- post-norm (`pre_norm=False`, no final norms) or pre-norm (`norm_first`: final norms from `final_norm`);
- the position table, passed explicitly (sinusoidal: at least 1024 rows, as attnlab extends them): attnlab's
  sinusoids interleave sin/cos (column 2j = sin, 2j+1 = cos, the book's layout) where CTranslate2's built-in
  table puts all sines first; learned position tables are passed the same way; rope, t5, none and grouped- or
  multi-query attention (num_kv_heads) as `attnlab.export.ctranslate2.positions` maps them;
- embeddings scaled by sqrt(D) before positions (CTranslate2's `scale_embeddings`, as attnlab), or by the
  model's own `embed_scale` folded into the exported table (imported Marian models: 1 or sqrt(D));
- the FFN activation (relu, swish/silu, exact gelu), and `-inf` output biases for the tokens attnlab never
  emits (`suppress_tokens`: Marian's <pad>);
- pruned heads (`attnlab heads --prune`) as zero weights in the unpruned shape (`attnlab.export.pruning`):
  CTranslate2 takes one head count per model, and zero heads compute what the pruned model does;
- separate or shared embeddings (shared ones are written to each place they are used);
- vocabularies in attnlab's index order; `<unk>`, `<bos>` and `<eos>` as attnlab names them; the
  source end token appended by CTranslate2 (`add_source_eos`), as attnlab's Translator appends it; the
  decoder starts from `<bos>`;
- the layer-norm epsilon of the model's LayerNorm modules;
- the alignment `translate --align` reads (the run's alignment.json, else the last-but-one layer's heads):
  CTranslate2's `return_attention` averages the first `alignment_heads` heads of `alignment_layer`, so that
  layer's cross-attention heads are exported in an order that puts the chosen ones first (query, key and
  value rows per head and the output projection's columns move together: the same function of the input).

Not exportable (one-line ValueError): the Bahdanau RNN model, and local (windowed) encoder attention and
alibi positions, which CTranslate2's encoder does not have.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from attnlab.decoding.align import alignment_heads
from attnlab.export.pruning import restore_pruned_heads
from attnlab.runs.loading import load_translator
from attnlab.runs.outputs import claim_output, write_output

from .positions import check_positions, set_positions, transformer_spec_for

if TYPE_CHECKING:
    from attnlab.models import Transformer, TransformerDecoderBlock, TransformerEncoderBlock

QUANTIZATIONS = ("float32", "int8", "int8_float32")


def _require_ctranslate2():
    try:
        import ctranslate2  # noqa: F401
        from ctranslate2.specs import transformer_spec
    except ImportError as exc:
        raise ValueError(
            "the ctranslate2 format needs the ctranslate2 package; install it with pip install 'attnlab[ct2]'"
        ) from exc
    return transformer_spec


def _tokens(vocab) -> list[str]:
    return list(vocab.to_tokens(list(range(len(vocab)))))


def _linear(spec, layer: nn.Linear) -> None:
    spec.weight = layer.weight.detach().float().clone()
    if layer.bias is not None:
        spec.bias = layer.bias.detach().float().clone()


def _fused(spec, layers: list[nn.Linear]) -> None:
    """CTranslate2 fuses projections (Q|K|V for self-attention, K|V for cross-attention) into one matrix."""
    spec.weight = torch.cat([lin.weight.detach().float() for lin in layers])
    if layers[0].bias is not None:
        spec.bias = torch.cat([lin.bias.detach().float() for lin in layers])


def _norm(spec, ln: nn.LayerNorm) -> None:
    spec.gamma = ln.weight.detach().float().clone()
    spec.beta = ln.bias.detach().float().clone()


def _attention(spec, mha, ln: nn.LayerNorm, self_attention: bool) -> None:
    if self_attention:
        _fused(spec.linear[0], [mha.W_q, mha.W_k, mha.W_v])
    else:
        _linear(spec.linear[0], mha.W_q)
        _fused(spec.linear[1], [mha.W_k, mha.W_v])
    _linear(spec.linear[-1], mha.W_o)
    _norm(spec.layer_norm, ln)


def _ffn(spec, ffn, ln: nn.LayerNorm) -> None:
    _linear(spec.linear_0, ffn.dense1)
    _linear(spec.linear_1, ffn.dense2)
    _norm(spec.layer_norm, ln)


def _inputs(spec, stack, scale: float) -> None:
    """Embeddings times `scale` (CTranslate2's own sqrt(D) scaling when that is the factor, else folded into
    the table) and the stack's positions (`attnlab.export.ctranslate2.positions.set_positions`)."""
    emb = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings  # encoder: a list
    weight = stack.embedding.weight.detach().float().clone()
    sqrt_d = math.sqrt(weight.shape[1])
    spec.scale_embeddings = math.isclose(scale, sqrt_d)
    emb.weight = weight if spec.scale_embeddings else weight * scale
    set_positions(spec, stack)


def _activation(name: str):
    from ctranslate2.specs import common_spec

    # attnlab's gelu is the exact (erf) one, as CTranslate2's GELU; swish/silu are one function.
    return {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}.get(
        name, common_spec.Activation.SWISH
    )


def check_exportable(model: nn.Module) -> None:
    """ValueError (one line) when `model` cannot be expressed as a CTranslate2 TransformerSpec."""
    model_type = getattr(model, "MODEL_TYPE", type(model).__name__)
    if model_type != "transformer":
        raise ValueError(
            f"CTranslate2 export supports the Transformer only, got a {model_type} model "
            f"(CTranslate2 has no Bahdanau RNN decoder); decode it with attnlab instead"
        )
    config = cast("Transformer", model).config
    check_positions(config)
    window = config.window
    if window is not None:
        raise ValueError(
            f"this Transformer uses local attention (window={window}), which "
            f"CTranslate2's encoder lacks; export a model trained without --set model.window"
        )


def alignment_export(model: nn.Module, alignment: tuple[int, list[int]] | None = None) -> tuple[int, list[int], int]:
    """(layer, head order, heads averaged) that make CTranslate2's return_attention the attention attnlab
    aligns with: `alignment` = (layer, heads) as attnlab numbers them (pruned heads gone; None: attnlab's
    default), mapped to the exported unpruned heads, the chosen ones first. ValueError (one line) for heads the
    model lacks, or a reordering grouped key/value heads cannot take."""
    layer, heads = alignment_heads(model, *(alignment or (None, None)))
    c = cast("Transformer", model).config
    module = cast("Transformer", model).attention_kinds()["cross"][layer]
    name = next(n for n, m in model.named_modules() if m is module)
    removed = set((c.pruned_heads or {}).get(name, ()))
    kept = [h for h in range(c.num_heads) if h not in removed]  # the exported index of each head left
    chosen = list(dict.fromkeys(kept[h] for h in heads))  # a head listed twice averages as itself
    order = chosen + [h for h in range(c.num_heads) if h not in chosen]
    if order != sorted(order) and c.kv_heads != c.num_heads:
        raise ValueError(
            f"alignment heads {heads} of layer {layer} cannot be put first in a grouped-query cross-attention; "
            "choose heads 0..k-1 (--align-heads) or export without the run's alignment.json"
        )
    return layer, order, len(chosen)


def _heads_first(spec, order: list[int], head_dim: int) -> None:
    """Reorder the heads of a filled cross-attention spec (Q, fused K|V, output projection) to `order`."""
    rows = torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in order])  # (H * Dh,)
    D = len(order) * head_dim
    for lin, index in ((spec.linear[0], rows), (spec.linear[1], torch.cat([rows, rows + D]))):
        lin.weight = lin.weight[index].contiguous()
        if isinstance(getattr(lin, "bias", None), torch.Tensor):
            lin.bias = lin.bias[index].contiguous()
    spec.linear[-1].weight = spec.linear[-1].weight[:, rows].contiguous()  # its bias is per output feature


def build_spec(model: nn.Module, src_vocab, tgt_vocab, alignment: tuple[int, list[int]] | None = None):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights and vocabularies (fp32); `alignment`:
    the (layer, heads) CTranslate2's return_attention averages (None: attnlab's default, `alignment_heads`)."""
    transformer_spec = _require_ctranslate2()
    check_exportable(model)
    align_layer, align_order, align_count = alignment_export(model, alignment)  # before pruned heads return
    # One num_heads for every module: pruned heads come back as zeros, which compute the same.
    model = restore_pruned_heads(cast("Transformer", model))  # check_exportable accepts Transformers only
    c = model.config
    spec = transformer_spec_for(
        c,
        transformer_spec,
        pre_norm=c.norm_first,
        activation=_activation(c.activation),
        alignment_layer=align_layer,
        alignment_heads=align_count,
    )
    enc, dec = model.encoder, model.decoder
    _inputs(spec.encoder, enc, c.embedding_scale)
    # nn.ModuleList yields plain Modules to a type checker: name what the stacks hold.
    enc_blocks = cast("list[TransformerEncoderBlock]", list(enc.blocks))
    dec_blocks = cast("list[TransformerDecoderBlock]", list(dec.blocks))
    for layer, block in zip(spec.encoder.layer, enc_blocks):
        _attention(layer.self_attention, block.attention, block.addnorm1.ln, self_attention=True)
        _ffn(layer.ffn, block.ffn, block.addnorm2.ln)
    _inputs(spec.decoder, dec, c.embedding_scale)
    for layer, dblock in zip(spec.decoder.layer, dec_blocks):
        _attention(layer.self_attention, dblock.self_attention, dblock.addnorm1.ln, self_attention=True)
        _attention(layer.attention, dblock.cross_attention, dblock.addnorm2.ln, self_attention=False)
        _ffn(layer.ffn, dblock.ffn, dblock.addnorm3.ln)
    if align_order != sorted(align_order):  # the identity needs no move (and grouped K/V heads refuse others)
        _heads_first(spec.decoder.layer[align_layer].attention, align_order, c.num_hiddens // c.num_heads)
    if c.norm_first:  # pre-norm stacks end with a LayerNorm; post-norm ones have none (pre_norm=False)
        _norm(spec.encoder.layer_norm, cast(nn.LayerNorm, enc.final_norm))
        _norm(spec.decoder.layer_norm, cast(nn.LayerNorm, dec.final_norm))
    _linear(spec.decoder.projection, dec.dense)
    if c.suppress_tokens:  # tokens attnlab never emits (Marian's <pad>): CTranslate2 never picks them either
        bias = spec.decoder.projection.bias
        if not isinstance(bias, torch.Tensor):
            bias = torch.zeros(c.tgt_vocab_size)
        bias[c.suppress_tokens] = float("-inf")
        spec.decoder.projection.bias = bias

    eps = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    if len(eps) != 1:
        raise ValueError(f"CTranslate2 takes one layer-norm epsilon, this model has {sorted(eps)}")
    cfg = spec.config
    cfg.layer_norm_epsilon = eps.pop()
    src_tokens, tgt_tokens = _tokens(src_vocab), _tokens(tgt_vocab)
    cfg.unk_token = tgt_tokens[tgt_vocab.unk]
    cfg.bos_token = tgt_tokens[tgt_vocab.bos]
    cfg.eos_token = tgt_tokens[tgt_vocab.eos]
    cfg.decoder_start_token = tgt_tokens[tgt_vocab.bos]
    if src_tokens[src_vocab.eos] != cfg.eos_token or src_tokens[src_vocab.unk] != cfg.unk_token:
        raise ValueError(
            "CTranslate2 names one <eos>/<unk> token for both sides, but the source and target "
            "vocabularies spell them differently"
        )
    cfg.add_source_eos = True  # attnlab's Translator ends every source with <eos>
    cfg.add_source_bos = False
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    return spec


def export(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    quantization: str = "float32",
    weights: str | os.PathLike | None = None,
    force: bool = False,
) -> Path:
    """Write a CTranslate2 model folder for the run folder `run_dir` to `out_dir` (atomically: built in a
    temp folder beside it, then renamed; its attnlab-output.json says what was exported, from where). `force`
    replaces an earlier CTranslate2 export, never any other folder (see `attnlab.runs.outputs`)."""

    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"unknown CTranslate2 quantization {quantization!r}; expected one of {', '.join(QUANTIZATIONS)}"
        )
    sources = [run_dir] + ([weights] if weights is not None else [])
    claim = claim_output(out_dir, "export-ctranslate2", force=force, sources=sources)
    _require_ctranslate2()
    translator = load_translator(run_dir, weights=weights)
    check_exportable(translator.model)
    alignment = translator.alignment_heads()  # the run's alignment.json, else the default
    spec = build_spec(translator.model, translator.src_vocab, translator.tgt_vocab, alignment)
    spec.validate()
    spec.optimize(quantization=quantization)
    note = {
        "source_run": str(Path(run_dir).resolve()),
        "weights": None if weights is None else str(weights),
        "quantization": quantization,
        "alignment": {"layer": alignment[0], "heads": alignment[1]},  # as attnlab numbers the heads
        "model": translator.config.get("model", {}),
        "input": "source tokens as attnlab tokenizes them (attnlab.export.source_tokens); "
        "<eos> is appended by the model",
    }
    with write_output(claim, note) as tmp:
        spec.save(str(tmp))
    return claim.path


__all__ = ["QUANTIZATIONS", "alignment_export", "build_spec", "check_exportable", "export"]
