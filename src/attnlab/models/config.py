"""Model configs: what every config shares (a JSON round trip that rejects keys it does not know) and
the `TransformerConfig`, whose options cover the book's model and imported Marian (OPUS-MT) ones."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar

from attnlab.attention.positions import get_scheme
from attnlab.utils.checks import check_field_types

# FFN nonlinearities by config name (Marian's "swish" is SiLU).
ACTIVATIONS = ("relu", "swish", "silu", "gelu")


class ConfigMixin:
    """Mixed into the model config dataclasses (`TransformerConfig`, `BahdanauConfig`)."""

    MODEL_TYPE: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        """Build a config from a JSON dict; unknown or missing keys raise ValueError naming them."""
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__}.from_dict expects a dict, got {type(d).__name__}")
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys {unknown}; valid keys are {names}")
        missing = [
            f.name
            for f in fields(cls)  # type: ignore[arg-type]
            if f.default is MISSING and f.default_factory is MISSING and f.name not in d
        ]
        if missing:
            raise ValueError(f"{cls.__name__} needs the keys {missing}, which the dict lacks")

        check_field_types(cls, d)  # "dropout": "x" in a config.json: one line naming the field
        return cls(**d)

    def check_positive(self, *names: str) -> None:
        """ValueError naming the first of `names` that is not a positive integer."""
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{type(self).__name__}.{name} must be a positive integer, got {value!r}")


def check_translator_config(cfg: Any) -> None:
    """The checks every translator config shares: sizes, heads dividing the width, dropout, and one
    vocabulary for shared embeddings (ValueError naming the config class and field)."""
    cls = type(cfg).__name__
    cfg.check_positive(
        "src_vocab_size", "tgt_vocab_size", "num_hiddens", "num_heads", "num_layers", "ffn_num_hiddens", "max_len"
    )
    D, H = cfg.num_hiddens, cfg.num_heads
    if D % H:
        raise ValueError(
            f"{cls}: num_hiddens={D} is not divisible by num_heads={H}; pick num_heads dividing num_hiddens "
            f"(e.g. {D} with 8 or 4)"
        )
    if not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"{cls}.dropout must lie in [0, 1), got {cfg.dropout}")
    if cfg.share_embeddings and cfg.src_vocab_size != cfg.tgt_vocab_size:
        raise ValueError(
            f"share_embeddings needs one vocabulary for both sides, got src_vocab_size={cfg.src_vocab_size} and "
            f"tgt_vocab_size={cfg.tgt_vocab_size}; prepare one joint vocabulary (`attnlab prepare ... --preset "
            "laptop`, or --tokenizer bpe --vocab-size 4000) or train with --set model.share_embeddings=false"
        )


@dataclass
class TransformerConfig(ConfigMixin):
    """Hyperparameters of `Transformer`; defaults are the paper's base model."""

    MODEL_TYPE = "transformer"

    src_vocab_size: int  # V_src, source vocabulary size
    tgt_vocab_size: int  # V, target vocabulary size
    num_hiddens: int = 512  # D, model width (d_model)
    num_heads: int = 8  # H, attention heads; must divide num_hiddens
    num_layers: int = 6  # N, encoder blocks, and decoder blocks unless decoder_layers is set
    ffn_num_hiddens: int = 2048  # inner width of the position-wise FFN (d_ff)
    dropout: float = 0.1  # residual, embedding and attention-weight dropout
    norm_first: bool = False  # pre-norm blocks + final LayerNorm per stack; False = post-norm (paper)
    share_embeddings: bool = False  # one matrix for source/target embeddings and output projection
    max_len: int = 1024  # positions precomputed (sinusoidal) or learned
    positions: str = (
        "sinusoidal"  # the scheme (attnlab.attention.positions): sinusoidal, learned, rope, alibi, t5, none
    )
    position_options: dict = field(default_factory=dict)  # the scheme's block, e.g. rope: {"base": 500.0}
    num_kv_heads: int | None = None  # key/value heads, dividing num_heads (1 = multi-query); None = num_heads
    bias: bool = True  # attention projection biases (as nn.Transformer); the book uses False
    window: int | None = None  # local attention in the encoder: each token sees +-window tokens
    decoder_layers: int | None = None  # decoder blocks (e.g. 1 under a deep encoder); None = num_layers
    # Options of imported Marian (OPUS-MT) models; the defaults are the book's model.
    activation: str = "relu"  # FFN nonlinearity: relu (paper), swish (= silu, Marian) or gelu
    embed_scale: float | None = None  # embeddings are multiplied by this; None = sqrt(num_hiddens) (paper)
    tie_output: bool = False  # output projection reuses the target embedding (share_embeddings implies it)
    decoder_start_token: int | None = None  # first decoder input; None = the target vocabulary's <bos>
    suppress_tokens: list[int] = field(default_factory=list)  # ids decoding never emits (Marian: <pad>)
    pruned_heads: dict | None = None  # {attention module name: original head indices removed} (pruning)

    def __post_init__(self):
        check_translator_config(self)
        dec = self.decoder_layers
        if dec is not None and (not isinstance(dec, int) or isinstance(dec, bool) or dec < 1):
            raise ValueError(
                f"TransformerConfig.decoder_layers must be None (as many as num_layers) or an integer >= 1, got {dec!r}"
            )
        if self.window is not None and (not isinstance(self.window, int) or self.window < 0):
            raise ValueError(f"TransformerConfig.window must be None or a non-negative integer, got {self.window!r}")
        self._check_positions()
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"TransformerConfig.activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.embed_scale is not None and not self.embed_scale > 0:
            raise ValueError(f"TransformerConfig.embed_scale must be None or positive, got {self.embed_scale!r}")
        if self.pruned_heads is not None and not (
            isinstance(self.pruned_heads, dict)
            and all(isinstance(k, str) and isinstance(v, list) for k, v in self.pruned_heads.items())
        ):
            raise ValueError(
                f"TransformerConfig.pruned_heads must map attention module names to lists of head "
                f"indices, got {self.pruned_heads!r}"
            )
        for tok in [self.decoder_start_token, *self.suppress_tokens]:
            if tok is not None and not 0 <= tok < self.tgt_vocab_size:
                raise ValueError(
                    f"TransformerConfig: token id {tok} (decoder_start_token / suppress_tokens) is "
                    f"outside the target vocabulary of {self.tgt_vocab_size} tokens"
                )

    def _check_positions(self) -> None:
        scheme = get_scheme(self.positions)
        if not isinstance(self.position_options, dict):
            raise ValueError(
                f"TransformerConfig.position_options must be a dict of the {self.positions!r} scheme's options, "
                f"got {self.position_options!r}"
            )
        options = scheme.options(self.position_options)
        scheme.check(options, self.num_hiddens, self.num_heads)
        self.position_options = scheme.options_dict(self.position_options)  # every option, as config.json keeps it
        kv = self.num_kv_heads
        if kv is not None and (
            not isinstance(kv, int) or isinstance(kv, bool) or not 1 <= kv <= self.num_heads or self.num_heads % kv
        ):
            raise ValueError(
                f"TransformerConfig.num_kv_heads must divide num_heads={self.num_heads} (1 = multi-query, "
                f"None = one per head), got {kv!r}"
            )

    @property
    def decoder_depth(self) -> int:
        """Decoder blocks: decoder_layers, or num_layers when it is None (the encoder has num_layers)."""
        return self.num_layers if self.decoder_layers is None else self.decoder_layers

    @property
    def kv_heads(self) -> int:
        """Key/value heads per attention module: num_kv_heads, or num_heads when it is None."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    def kv_cache_bytes(self, target_tokens: int = 1, source_tokens: int = 0, bytes_per_value: int = 4) -> int:
        """Bytes a decoding KV cache holds for one sentence: keys and values of every decoder layer's
        self-attention for `target_tokens` steps, plus its cross-attention over `source_tokens` (before
        any head pruning; 4 bytes per value in float32, 2 in float16/bfloat16)."""
        per_token = 2 * self.decoder_depth * self.kv_heads * (self.num_hiddens // self.num_heads) * bytes_per_value
        return per_token * (target_tokens + source_tokens)

    @property
    def position_block(self) -> Any:
        """The position scheme's config block (its `Options` dataclass), from `position_options`."""
        return get_scheme(self.positions).options(self.position_options)

    @property
    def embedding_scale(self) -> float:
        """What embeddings are multiplied by: `embed_scale`, or sqrt(D) as in the paper."""
        return math.sqrt(self.num_hiddens) if self.embed_scale is None else float(self.embed_scale)
