"""The model types a run folder may name: their config classes (`CONFIGS`), the ones that translate
(`TRANSLATORS`), and `build_model(model_type, config_dict)` that constructs one from its JSON config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import ConfigMixin, TransformerConfig
from .decoder_only import DecoderOnly, DecoderOnlyConfig
from .seq2seq import BahdanauConfig, EncoderDecoder
from .transformer import Transformer
from .vit import ViT, ViTConfig

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


__all__ = ["CONFIGS", "TRANSLATORS", "build_model"]
