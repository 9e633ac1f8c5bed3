"""Hugging Face Marian (OPUS-MT) models in and out of attnlab.

    import_hf(SOURCE, OUT): a folder saved by `MarianMTModel.save_pretrained` (+ `MarianTokenizer`:
        source.spm, target.spm, vocab.json) -> an attnlab run folder (config.json, model.safetensors,
        src_vocab.json / tgt_vocab.json as `SentencePieceVocab`). Needs only `sentencepiece`.
    export_hf(RUN, OUT): an attnlab Transformer run folder -> a folder `MarianMTModel.from_pretrained`
        loads (and `MarianTokenizer` / `PreTrainedTokenizerFast` for its tokenizer). Needs `transformers`.

Marian is attnlab's Transformer with options (see `TransformerConfig`): post-norm blocks, biases on every
projection, FFN activation swish, embeddings scaled by sqrt(D) (`scale_embedding`), sinusoids with the
sines in the first half of the features and the cosines in the second ("split"), a final logits bias
(attnlab's output `dense.bias`), and decoding that starts from <pad> and never emits it.

Weights are matched module by module (not by attnlab parameter names), so the mapping follows the
model's structure: each block's LayerNorms in the order the block applies them.

The book's interleaved sinusoids on export: the exported model is made exactly equivalent by permuting
the hidden basis. Interleaved and split sinusoids are the same columns in another order, and every
operation on the residual stream (embeddings, projections in and out of it, LayerNorm, which only pools
over features) commutes with a permutation of the features, so permuting every tensor's hidden axis
gives the same logits with Marian's split sinusoids. Refusing would have shut out every model trained
with the book's defaults, for no loss of exactness.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.attention.positions import get_scheme, sinusoidal_encoding
from attnlab.data.spm import SentencePieceVocab
from attnlab.export.hf_weights import read_hf_weights, weight_shapes, weights_file
from attnlab.models import Transformer, TransformerConfig
from attnlab.models.config import ACTIVATIONS
from attnlab.runs.config import write_run_config
from attnlab.runs.outputs import claim_output, write_output
from attnlab.runs.weights import save_weights
from attnlab.utils.files import read_json_object

__all__ = ["import_hf", "marian_to_config", "config_to_marian"]  # export: attnlab.export.hf_export

# Marian config keys that attnlab cannot follow when they take another value than this.
_REQUIRED = {
    "model_type": "marian",
    "is_encoder_decoder": True,
    "encoder_layerdrop": None,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
}


def _fail(option: str, got, want: str) -> None:
    raise ValueError(
        f"the model's {option}={got!r} is an option attnlab's Transformer lacks ({want}); "
        f"only Marian-shaped encoder-decoders (MarianMTModel) can be imported"
    )


# Marian config keys without a default that attnlab could assume.
_NEEDED = ("vocab_size", "d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim")


def _token_id(hf: dict, key: str, size, default=None):
    """hf[key] (or `default`) checked to be a token id of a vocabulary of `size` tokens."""
    value = hf.get(key, default)
    if not isinstance(size, int) or isinstance(size, bool):
        return value  # the vocabulary size itself is refused by TransformerConfig, naming it
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise ValueError(
            f"the model's {key}={value!r} is not a token id of its {size}-token vocabulary; "
            f"the config.json is damaged — restore it from the model's source"
        )
    return value


# --------------------------------------------------------------------------- config
def marian_to_config(hf: dict, generation: dict | None = None) -> dict:
    """A Marian config.json (dict) -> a `TransformerConfig` dict; one clear error per unsupported option."""

    generation = generation or {}
    if not isinstance(hf, dict):
        raise ValueError(f"a Marian config must be a JSON object, got {type(hf).__name__}")
    if hf.get("model_type") != "marian":
        _fail("model_type", hf.get("model_type"), "expected 'marian', as OPUS-MT models are")
    for key, want in _REQUIRED.items():
        if key in hf and want is not None and hf[key] != want:
            _fail(key, hf[key], f"attnlab needs {want!r}")
    for a, b in (
        ("encoder_layers", "decoder_layers"),
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if hf.get(a) != hf.get(b):
            _fail(f"{a}/{b}", (hf.get(a), hf.get(b)), "the encoder and decoder must have the same shape")
    lacking = [k for k in _NEEDED if k not in hf]
    if lacking:
        raise ValueError(
            f"the model's config.json lacks {', '.join(lacking)}; it is not a complete MarianConfig — "
            f"pass the folder written by MarianMTModel.save_pretrained"
        )
    act = hf.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        _fail("activation_function", act, f"one of {ACTIVATIONS}")
    src_v = hf["vocab_size"]
    tgt_v = hf.get("decoder_vocab_size") or src_v
    shared = hf.get("share_encoder_decoder_embeddings", True)
    tie = hf.get("tie_word_embeddings", True)
    if shared and src_v != tgt_v:
        _fail("decoder_vocab_size", tgt_v, f"shared embeddings need vocab_size={src_v}")
    pad = _token_id(hf, "pad_token_id", tgt_v)
    _token_id(hf, "eos_token_id", tgt_v)
    bad = generation.get("bad_words_ids", hf.get("bad_words_ids")) or []
    if not isinstance(bad, list) or any(not isinstance(b, list) or len(b) != 1 for b in bad):
        _fail("bad_words_ids", bad, "only single forbidden tokens")
    cfg = TransformerConfig(
        src_vocab_size=src_v,
        tgt_vocab_size=tgt_v,
        num_hiddens=hf["d_model"],
        num_heads=hf["encoder_attention_heads"],
        num_layers=hf["encoder_layers"],
        ffn_num_hiddens=hf["encoder_ffn_dim"],
        dropout=0.0,
        norm_first=False,
        share_embeddings=bool(shared and tie),
        max_len=hf.get("max_position_embeddings", 512),
        bias=True,
        activation=act,
        embed_scale=None if hf.get("scale_embedding", False) else 1.0,
        positions="sinusoidal",
        position_options={"layout": "split"},  # Marian's sinusoids: every sine, then every cosine
        tie_output=bool(tie),
        decoder_start_token=_token_id(hf, "decoder_start_token_id", tgt_v, default=pad),
        suppress_tokens=sorted({b[0] for b in bad}),
    )
    if shared and not tie:
        _fail("tie_word_embeddings", tie, "shared encoder/decoder embeddings are also the output projection")
    return cfg.to_dict()


def config_to_marian(cfg, pad: int, eos: int) -> dict:
    """A `TransformerConfig` -> Marian config keys; raises naming the first option Marian cannot express."""
    if cfg.norm_first:
        _fail("norm_first", True, "Marian blocks are post-norm")
    if cfg.window is not None:
        _fail("window", cfg.window, "Marian attends globally")
    if not get_scheme(cfg.positions).marian or cfg.kv_heads != cfg.num_heads:
        raise ValueError(
            f"a MarianMTModel holds sinusoidal positions and one key/value head per head; this model has "
            f"positions={cfg.positions!r}, num_kv_heads={cfg.num_kv_heads!r}: decode it with attnlab instead"
        )
    if cfg.embed_scale is not None and cfg.embed_scale not in (1.0, cfg.num_hiddens**0.5):
        _fail("embed_scale", cfg.embed_scale, "Marian scales embeddings by sqrt(D) or not at all")
    tie = cfg.share_embeddings or cfg.tie_output
    start = cfg.decoder_start_token
    return dict(
        model_type="marian",
        architectures=["MarianMTModel"],
        vocab_size=cfg.src_vocab_size,
        decoder_vocab_size=cfg.tgt_vocab_size,
        d_model=cfg.num_hiddens,
        encoder_layers=cfg.num_layers,
        decoder_layers=cfg.num_layers,
        encoder_attention_heads=cfg.num_heads,
        decoder_attention_heads=cfg.num_heads,
        encoder_ffn_dim=cfg.ffn_num_hiddens,
        decoder_ffn_dim=cfg.ffn_num_hiddens,
        activation_function=cfg.activation,
        max_position_embeddings=cfg.max_len,
        scale_embedding=cfg.embed_scale is None or cfg.embed_scale != 1.0,
        share_encoder_decoder_embeddings=cfg.share_embeddings,
        tie_word_embeddings=tie,
        pad_token_id=pad,
        eos_token_id=eos,
        forced_eos_token_id=None,
        decoder_start_token_id=start if start is not None else None,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )


# --------------------------------------------------------------------------- weights, module by module
def _layer_norms(block: nn.Module) -> list[nn.LayerNorm]:
    # In registration order, which is the order a block applies them (attention, [cross], FFN).
    return [m for m in block.modules() if isinstance(m, nn.LayerNorm)]


def _weight_map(model) -> list[tuple[str, Tensor, int | None]]:
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


# Where a Marian tensor may be stored under another name (tied embeddings are saved once).
_SHARED = ("model.shared.weight",)
_SOURCES = {
    "model.encoder.embed_tokens.weight": _SHARED,
    "model.decoder.embed_tokens.weight": _SHARED,
    "lm_head.weight": ("model.decoder.embed_tokens.weight", "model.shared.weight"),
}


def _check_shapes(skeleton: Transformer, shapes: Mapping[str, tuple[int, ...]], path: Path) -> None:
    """Every tensor `skeleton` (a meta-device model: no memory) needs, against the weights file's shapes."""
    for key, tensor, _ in _weight_map(skeleton):
        shape = _lookup(shapes, key, *_SOURCES.get(key, ()))
        if tuple(shape) != tuple(tensor.shape):
            raise ValueError(
                f"Marian tensor {key} in {path} has shape {tuple(shape)}, {path.parent / 'config.json'} "
                f"implies {tuple(tensor.shape)}; the folder's files disagree — download the model again"
            )
    bias = shapes.get("final_logits_bias")
    V = skeleton.config.tgt_vocab_size
    if bias is not None and math.prod(bias) != V:
        raise ValueError(f"final_logits_bias in {path} has shape {tuple(bias)}, the model's vocabulary {V} tokens")


# --------------------------------------------------------------------------- tokenizers
def _marian_vocabs(source: Path, hf: dict, lang: tuple[str | None, str | None]):
    tok_cfg = {}
    if (source / "tokenizer_config.json").is_file():
        tok_cfg = read_json_object(source / "tokenizer_config.json", "tokenizer config")
    for name in ("source.spm", "target.spm", "vocab.json"):
        if not (source / name).is_file():
            raise FileNotFoundError(
                f"{source / name} is missing: attnlab imports the MarianTokenizer files "
                f"(source.spm, target.spm, vocab.json) saved beside the model"
            )

    def table(path: Path, size: int) -> list[str]:
        enc = read_json_object(path, "MarianTokenizer vocabulary")
        tokens: list[str | None] = [None] * size
        for tok, i in enc.items():
            if isinstance(i, bool) or not isinstance(i, int):
                raise ValueError(
                    f"{path} maps {tok!r} to {i!r}, not to an integer id; re-save the tokenizer with "
                    f"MarianTokenizer.save_pretrained or download the model again"
                )
            if 0 <= i < size:
                tokens[i] = tok
        holes = [i for i, t in enumerate(tokens) if t is None]
        if holes:
            raise ValueError(
                f"{path} numbers no token for ids {holes[:5]} of the model's {size}; "
                f"the tokenizer and the model do not match"
            )
        return [t for t in tokens if t is not None]  # all of them: no holes

    src_tokens = table(source / "vocab.json", hf["vocab_size"])
    target_file = tok_cfg.get("target_vocab_file") if tok_cfg.get("separate_vocabs") else None
    tgt_file = source / (Path(target_file).name if isinstance(target_file, str) else "vocab.json")
    tgt_tokens = table(tgt_file, hf.get("decoder_vocab_size") or hf["vocab_size"])
    pad = hf.get("pad_token_id")
    start = hf.get("decoder_start_token_id", pad)

    def specials(tokens):
        # Marian's decoder starts from decoder_start_token_id (its <pad>): that is attnlab's "bos" role.
        unk = tok_cfg.get("unk_token", "<unk>")
        return {
            "unk": unk if isinstance(unk, str) else "<unk>",
            "pad": tokens[pad],
            "eos": tokens[hf["eos_token_id"]],
            "bos": tokens[start],
        }

    def vocab(spm: str, table_file: Path, tokens: list[str], language):
        try:
            return SentencePieceVocab.from_file(
                source / spm, tokens, specials(tokens), lang=language if isinstance(language, str) else None
            )
        except ValueError as exc:
            if str(source / spm) in str(exc):
                raise
            raise ValueError(f"{source / spm} with {table_file}: {exc}") from exc

    return vocab("source.spm", source / "vocab.json", src_tokens, lang[0]), vocab(
        "target.spm", tgt_file, tgt_tokens, lang[1]
    )


# --------------------------------------------------------------------------- import
def import_hf(source: str | os.PathLike, out: str | os.PathLike, force: bool = False) -> Path:
    """Convert a saved MarianMTModel folder into an attnlab run folder `out`; returns `out`.

    `out` must be new, or (with `force`) an earlier attnlab run that holds nothing else (see
    `attnlab.runs.outputs`). Everything is checked and built in memory, then written into a temp folder
    renamed into place, so a failure never leaves a half-written run.
    """

    source, out = Path(source), Path(out)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(
            f"{source / 'config.json'} is missing: SOURCE must be a local folder saved by "
            f"save_pretrained (see README: huggingface-cli download ... --local-dir)"
        )
    claim = claim_output(out, "run", force=force, sources=[source])
    hf = read_json_object(source / "config.json", "Hugging Face model config")
    gen_path = source / "generation_config.json"
    gen = read_json_object(gen_path, "generation config") if gen_path.is_file() else {}
    cfg_dict = marian_to_config(hf, gen)
    cfg = TransformerConfig.from_dict(cfg_dict)
    # The config is compared with the weights' shapes on a meta-device model before anything is
    # allocated: a config.json asking for gigabytes fails in one line.
    weights_path = weights_file(source)
    with torch.device("meta"):
        skeleton = Transformer(cfg)
    _check_shapes(skeleton, weight_shapes(weights_path), weights_path)
    src_vocab, tgt_vocab = _marian_vocabs(source, hf, (hf.get("source_lang"), hf.get("target_lang")))
    weights = read_hf_weights(weights_path)

    # Marian's positions must be the fixed split sinusoids attnlab computes (they are not trained);
    # recent transformers versions do not even save them.
    for side in ("encoder", "decoder"):
        P = weights.get(f"model.{side}.embed_positions.weight", weights.get(f"{side}.embed_positions.weight"))
        if P is None:
            continue
        if P.dim() != 2 or P.shape[1] != cfg.num_hiddens:
            _fail(f"{side}.embed_positions", tuple(P.shape), f"a (positions, {cfg.num_hiddens}) table")
        ref = sinusoidal_encoding(torch.arange(P.shape[0]), P.shape[1], "split")
        if not torch.allclose(P.float(), ref, atol=1e-4):
            _fail(f"{side}.embed_positions", "trained values", "fixed split sinusoids")

    model = Transformer(cfg)
    with torch.no_grad():
        for key, tensor, _ in _weight_map(model):
            tensor.copy_(_lookup(weights, key, *_SOURCES.get(key, ())).float())
        bias = weights.get("final_logits_bias")
        zeros = torch.zeros(cfg.tgt_vocab_size)
        model.decoder.dense.bias.copy_(bias.reshape(-1).float() if bias is not None else zeros)

    with write_output(claim) as tmp:
        data = {
            "source": "hf",
            "hf_source": str(source.resolve()),
            "hf_model_type": "marian",
            "generation": {k: gen[k] for k in ("num_beams", "max_length", "length_penalty") if k in gen},
        }
        write_run_config(tmp, "transformer", cfg.to_dict(), {}, data, src_vocab, tgt_vocab)
        save_weights(model, tmp / "model.safetensors")
    return out
