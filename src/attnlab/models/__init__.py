"""Models built from `attnlab.attention`.

Translators (`Transformer`, the Bahdanau `EncoderDecoder`) share the decoding protocol of ARCHITECTURE.md
(`forward`, `start_decoding`, `decode_step`, `reorder_state`) and are built from JSON with
`build_model(model_type, config_dict)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnlab.models.config import ConfigMixin, TransformerConfig
from attnlab.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from attnlab.models.kernel_regression import NadarayaWatson, NWKernelRegression
from attnlab.models.seq2seq import (
    BahdanauConfig,
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqEncoder,
    Seq2SeqState,
    build_bahdanau,
)
from attnlab.models.transformer import Transformer, TransformerState
from attnlab.models.transformer_layers import (
    AddNorm,
    PositionWiseFFN,
    Sublayer,
    TransformerDecoder,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerEncoderBlock,
)
from attnlab.models.vit import ViT, ViTConfig

CONFIGS: dict[str, type[ConfigMixin]] = {
    "transformer": TransformerConfig,
    "bahdanau": BahdanauConfig,
    "vit": ViTConfig,
    "decoder-only": DecoderOnlyConfig,
}
# Model types that translate (a run of any other type, e.g. a ViT, is refused by translator commands).
TRANSLATORS = ("transformer", "bahdanau", "decoder-only")


def build_model(model_type: str, config_dict: Mapping[str, Any]) -> Any:
    """Construct a model from its type name and JSON config (e.g. a run folder's config.json)."""
    if model_type not in CONFIGS:
        raise ValueError(f"unknown model type {model_type!r}; expected one of {sorted(CONFIGS)}")
    config = CONFIGS[model_type].from_dict(config_dict)
    if model_type == "transformer":
        return Transformer(config)
    if model_type == "vit":
        return ViT(config)
    if model_type == "decoder-only":
        return DecoderOnly(config)
    return EncoderDecoder.from_config(config)


__all__ = [
    "NadarayaWatson",
    "NWKernelRegression",
    "AddNorm",
    "Sublayer",
    "PositionWiseFFN",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoder",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerEncoderBlock",
    "TransformerState",
    "BahdanauConfig",
    "EncoderDecoder",
    "Seq2SeqAttentionDecoder",
    "Seq2SeqEncoder",
    "Seq2SeqState",
    "build_bahdanau",
    "ViT",
    "ViTConfig",
    "DecoderOnly",
    "DecoderOnlyConfig",
    "CONFIGS",
    "TRANSLATORS",
    "build_model",
]
