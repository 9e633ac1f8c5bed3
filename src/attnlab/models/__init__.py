"""Models built from `attnlab.attention`.

Translators (`Transformer`, the Bahdanau `EncoderDecoder`) share the decoding protocol of ARCHITECTURE.md
(`forward`, `start_decoding`, `decode_step`, `reorder_state`) and are built from JSON with
`build_model(model_type, config_dict)`.
"""

from attnlab.models.config import TransformerConfig
from attnlab.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from attnlab.models.kernel_regression import NadarayaWatson, NWKernelRegression
from attnlab.models.registry import CONFIGS, TRANSLATORS, build_model
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
