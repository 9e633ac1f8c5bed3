"""attnlab's position schemes and key/value head layouts in CTranslate2's Transformer spec.

    spec = transformer_spec_for(config, transformer_spec, pre_norm=True, alignment_layer=0, alignment_heads=4)
    set_positions(spec.encoder, model.encoder)   # and spec.decoder, model.decoder

Each scheme says how CTranslate2 holds it (`PositionScheme.ct2`, `ct2_options`, `ct2_write` in its module of
`attnlab.attention.positions`): sinusoidal and learned pass their table, none an all-zero one, rope its
rotary options, t5 its bias table in every self-attention layer; alibi is refused (one-line ValueError,
before anything is written). num_kv_heads: `num_heads_kv` in every attention (self and cross, as attnlab),
K and V rows as attnlab stores them (KV head g serves query heads g*G .. g*G + G - 1 in both).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnlab.attention.positions import SCHEMES, get_scheme

if TYPE_CHECKING:
    from attnlab.models import TransformerConfig


def exportable() -> dict[str, str | None]:
    """scheme -> how CTranslate2 holds it, or None where it cannot (docs/translators.md has the same table)."""
    return {name: scheme.ct2 for name, scheme in SCHEMES.items()}


def check_positions(config: TransformerConfig) -> None:
    """ValueError (one line) when CTranslate2's spec cannot hold `config`'s position scheme."""
    scheme = get_scheme(config.positions)
    if scheme.ct2 is None:
        raise ValueError(
            f"this Transformer uses positions={config.positions!r}, which {scheme.ct2_refusal}; "
            f"decode it with attnlab instead"
        )


def _stack_options(config: TransformerConfig) -> dict[str, Any]:
    """Keyword options of both stack specs for `config`'s positions and key/value heads."""
    options: dict[str, Any] = {"relative_attention_bias": False}
    if config.kv_heads != config.num_heads:
        options["num_heads_kv"] = config.kv_heads
    options.update(
        get_scheme(config.positions).ct2_options(config.position_block, config.num_hiddens // config.num_heads)
    )
    return options


def transformer_spec_for(
    config: TransformerConfig,
    transformer_spec,
    *,
    pre_norm: bool,
    activation,
    alignment_layer: int,
    alignment_heads: int,
):
    """A `TransformerSpec` (`transformer_spec` is CTranslate2's module) with `config`'s layer counts (the
    encoder's and the decoder's, which may differ), head counts, position scheme and key/value heads; what
    `TransformerSpec.from_config` builds, plus the rotary and grouped-query options it does not pass on."""
    check_positions(config)
    options = _stack_options(config)
    encoder = transformer_spec.TransformerEncoderSpec(
        config.num_layers, config.num_heads, pre_norm=pre_norm, activation=activation, **options
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        config.decoder_depth,
        config.num_heads,
        pre_norm=pre_norm,
        activation=activation,
        alignment_layer=alignment_layer,
        alignment_heads=alignment_heads,
        **options,
    )
    return transformer_spec.TransformerSpec(encoder, decoder)


def set_positions(spec, stack) -> None:
    """Write `stack`'s positions (an attnlab encoder or decoder) into its stack spec: the table, the T5
    bias of every layer, or nothing (rope: the spec carries its options)."""
    get_scheme(stack.positions).ct2_write(spec, stack)


__all__ = ["check_positions", "exportable", "set_positions", "transformer_spec_for"]
