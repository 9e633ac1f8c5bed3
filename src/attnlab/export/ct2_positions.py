"""attnlab's position schemes and key/value head layouts in CTranslate2's Transformer spec.

    spec = transformer_spec_for(config, transformer_spec, pre_norm=True, alignment_layer=0, alignment_heads=4)
    set_positions(spec.encoder, model.encoder)   # and spec.decoder, model.decoder

What CTranslate2's `TransformerEncoderSpec` / `TransformerDecoderSpec` hold, scheme by scheme:
- sinusoidal, learned: the position table, passed explicitly (`position_encodings.encodings`);
- none: an all-zero table (CTranslate2 adds its own sinusoids when a stack has no table and no other scheme);
- rope: `rotary_dim` (the rotated features, attnlab's `rope_fraction`), `rotary_base`, and
  `rotary_interleave=False`: attnlab rotates half-split pairs (f, f + rot/2), GPT-NeoX's layout, which is
  CTranslate2's non-interleaved one, so no row of W_q/W_k is permuted; on self-attention only, as attnlab;
- t5: `relative_attention_bias` (buckets, H) in every self-attention layer, the same tensor for all layers
  of a stack (attnlab shares one table per stack; CTranslate2 stores it once), `relative_attention_max_distance`;
  the bucket count is the table's rows, bidirectional in the encoder and causal in the decoder as in
  attnlab; the bias is added to the scaled scores in both;
- num_kv_heads: `num_heads_kv` in every attention (self and cross, as attnlab), K and V rows as attnlab
  stores them (KV head g serves query heads g*G .. g*G + G - 1 in both).

Refused (one-line ValueError, before anything is written): alibi, since CTranslate2's encoder spec has no
ALiBi (only its decoder spec does, for decoder-only models) and attnlab's alibi biases both stacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnlab.attention.rotary import rotary_dim

if TYPE_CHECKING:
    from attnlab.models import TransformerConfig

SINUSOID_ROWS = 1024  # positions exported for table-less models (whatever their max_len)

# scheme -> how CTranslate2 holds it, or None where it cannot (docs/translators.md has the same table)
EXPORTABLE: dict[str, str | None] = {
    "sinusoidal": "position table",
    "learned": "position table",
    "none": "zero position table",
    "rope": "rotary_dim, rotary_base, rotary_interleave=False",
    "t5": "relative_attention_bias per self-attention layer",
    "alibi": None,
}


def check_positions(config: TransformerConfig) -> None:
    """ValueError (one line) when CTranslate2's spec cannot hold `config`'s position scheme."""
    if EXPORTABLE.get(config.positions) is None:
        raise ValueError(
            f"this Transformer uses positions={config.positions!r}, which CTranslate2's encoder spec lacks "
            f"(its ALiBi is for decoders only, attnlab's biases both stacks); decode it with attnlab instead"
        )


def _stack_options(config: TransformerConfig) -> dict[str, Any]:
    """Keyword options of both stack specs for `config`'s positions and key/value heads."""
    options: dict[str, Any] = {"relative_attention_bias": config.positions == "t5"}
    if config.kv_heads != config.num_heads:
        options["num_heads_kv"] = config.kv_heads
    if config.positions == "rope":
        options.update(
            rotary_dim=rotary_dim(config.num_hiddens // config.num_heads, config.rope_fraction),
            rotary_interleave=False,
            rotary_base=config.rope_base,
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
    """A `TransformerSpec` (`transformer_spec` is CTranslate2's module) with `config`'s layer and head
    counts, position scheme and key/value heads; what `TransformerSpec.from_config` builds, plus the
    rotary and grouped-query options it does not pass on."""
    check_positions(config)
    options = _stack_options(config)
    encoder = transformer_spec.TransformerEncoderSpec(
        config.num_layers, config.num_heads, pre_norm=pre_norm, activation=activation, **options
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        config.num_layers,
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
    positions = stack.positions
    if positions in ("sinusoidal", "learned", "none"):
        pe = stack.pos_encoding
        if pe is None:  # none: zeros, so CTranslate2 adds no sinusoids of its own
            table = torch.zeros(SINUSOID_ROWS, stack.num_hiddens)
        elif pe.learned:
            table = pe.embedding.weight
        else:
            # attnlab computes sinusoids past max_len on the fly, CTranslate2 stops at the table's end: export
            # at least SINUSOID_ROWS of them, so long sources and outputs (attnlab caps them at 200) still fit.
            table = pe.encoding(max(pe.max_len, SINUSOID_ROWS))
        spec.position_encodings.encodings = table.detach().float().clone()
    elif positions == "t5":
        bias = stack.relative_bias
        table = bias.embedding.weight.detach().float().clone()  # (buckets, H), as CTranslate2 reads it
        for layer in spec.layer:  # one tensor for all layers: the saved model holds it once
            layer.self_attention.relative_attention_bias = table
            layer.self_attention.relative_attention_max_distance = np.dtype("int32").type(bias.max_distance)


__all__ = ["EXPORTABLE", "SINUSOID_ROWS", "check_positions", "set_positions", "transformer_spec_for"]
