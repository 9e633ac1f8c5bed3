"""Marian's config.json <-> attnlab's `TransformerConfig`: `marian_to_config` (import) and
`config_to_marian` (export), each refusing in one line what the other side cannot hold."""

from __future__ import annotations

from attnlab.attention.positions import get_scheme
from attnlab.models.config import ACTIVATIONS, TransformerConfig

_REQUIRED = {
    "model_type": "marian",
    "is_encoder_decoder": True,
    "encoder_layerdrop": None,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
}


def refuse(option: str, got, want: str) -> None:
    """One-line ValueError: the Marian option `option` is `got`, attnlab's Transformer only follows `want`."""
    raise ValueError(
        f"the model's {option}={got!r} is an option attnlab's Transformer lacks ({want}); "
        f"only Marian-shaped encoder-decoders (MarianMTModel) can be imported"
    )


# Marian config keys without a default that attnlab could assume.
_NEEDED = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "encoder_ffn_dim")


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
        refuse("model_type", hf.get("model_type"), "expected 'marian', as OPUS-MT models are")
    for key, want in _REQUIRED.items():
        if key in hf and want is not None and hf[key] != want:
            refuse(key, hf[key], f"attnlab needs {want!r}")
    for a, b in (  # the stacks' depths may differ (decoder_layers); their blocks' shapes may not
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if hf.get(a) != hf.get(b):
            refuse(f"{a}/{b}", (hf.get(a), hf.get(b)), "the encoder's and decoder's blocks must have the same shape")
    lacking = [k for k in _NEEDED if k not in hf]
    if lacking:
        raise ValueError(
            f"the model's config.json lacks {', '.join(lacking)}; it is not a complete MarianConfig — "
            f"pass the folder written by MarianMTModel.save_pretrained"
        )
    act = hf.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        refuse("activation_function", act, f"one of {ACTIVATIONS}")
    src_v = hf["vocab_size"]
    tgt_v = hf.get("decoder_vocab_size") or src_v
    shared = hf.get("share_encoder_decoder_embeddings", True)
    tie = hf.get("tie_word_embeddings", True)
    if shared and src_v != tgt_v:
        refuse("decoder_vocab_size", tgt_v, f"shared embeddings need vocab_size={src_v}")
    pad = _token_id(hf, "pad_token_id", tgt_v)
    _token_id(hf, "eos_token_id", tgt_v)
    bad = generation.get("bad_words_ids", hf.get("bad_words_ids")) or []
    if not isinstance(bad, list) or any(not isinstance(b, list) or len(b) != 1 for b in bad):
        refuse("bad_words_ids", bad, "only single forbidden tokens")
    cfg = TransformerConfig(
        src_vocab_size=src_v,
        tgt_vocab_size=tgt_v,
        num_hiddens=hf["d_model"],
        num_heads=hf["encoder_attention_heads"],
        num_layers=hf["encoder_layers"],
        decoder_layers=None if hf["decoder_layers"] == hf["encoder_layers"] else hf["decoder_layers"],
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
        refuse("tie_word_embeddings", tie, "shared encoder/decoder embeddings are also the output projection")
    return cfg.to_dict()


def config_to_marian(cfg, pad: int, eos: int) -> dict:
    """A `TransformerConfig` -> Marian config keys; raises naming the first option Marian cannot express."""
    if cfg.norm_first:
        refuse("norm_first", True, "Marian blocks are post-norm")
    if cfg.window is not None:
        refuse("window", cfg.window, "Marian attends globally")
    if not get_scheme(cfg.positions).marian or cfg.kv_heads != cfg.num_heads:
        raise ValueError(
            f"a MarianMTModel holds sinusoidal positions and one key/value head per head; this model has "
            f"positions={cfg.positions!r}, num_kv_heads={cfg.num_kv_heads!r}: decode it with attnlab instead"
        )
    if cfg.embed_scale is not None and cfg.embed_scale not in (1.0, cfg.num_hiddens**0.5):
        refuse("embed_scale", cfg.embed_scale, "Marian scales embeddings by sqrt(D) or not at all")
    tie = cfg.share_embeddings or cfg.tie_output
    start = cfg.decoder_start_token
    return dict(
        model_type="marian",
        architectures=["MarianMTModel"],
        vocab_size=cfg.src_vocab_size,
        decoder_vocab_size=cfg.tgt_vocab_size,
        d_model=cfg.num_hiddens,
        encoder_layers=cfg.num_layers,
        decoder_layers=cfg.decoder_depth,
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


__all__ = ["config_to_marian", "marian_to_config", "refuse"]
