"""What a position scheme is: how it enters a Transformer stack, its config block, its export mappings and
its view. Every scheme is one module of this package with one `PositionScheme`; stacks, exporters and views
look it up by name (`registry.get_scheme`), so a new scheme is one file and its test.

A scheme enters in one of four places (`enters`):
- EMBEDDINGS: added to the (scaled) token embeddings (`StackPositions.encoding`: X (B, L, D), offset -> (B, L, D));
- QUERIES_KEYS: rotating every self-attention's queries and keys (`StackPositions.rotary`, as `RotaryEmbedding`);
- SCORES: a float bias added to every self-attention's scaled scores (`StackPositions.bias`:
  q_pos (Lq,), k_pos (Lk,) -> (1, H, Lq, Lk), added on the fused path as SDPA's float mask and on the recorded
  path before the masked softmax; with a KV cache the queries are the last Lq of Lk positions);
- NOTHING: the model is position-blind (order reaches it through nothing but the causal mask).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnlab.utils.checks import check_field_types

EMBEDDINGS, QUERIES_KEYS, SCORES, NOTHING = "embeddings", "queries and keys", "scores", "nothing"
ENTRIES = (EMBEDDINGS, QUERIES_KEYS, SCORES, NOTHING)
DECIMALS = 4  # a view's numbers: enough to read a bias off, and small answers for long sentences


@dataclass(frozen=True)
class NoOptions:
    """The config block of a scheme without options of its own."""


@dataclass(frozen=True)
class StackShape:
    """What a scheme needs to build one stack's modules."""

    num_hiddens: int  # D
    num_heads: int  # H, query heads of each attention
    dropout: float  # after the positions are added (embedding dropout)
    max_len: int  # rows of a position table (precomputed sinusoids, learned rows)
    causal: bool  # the decoder's stack (keys after the query are hidden), not the encoder's


@dataclass
class StackPositions:
    """The modules of one stack's positions; at most one is set, as the scheme's `enters` says. A stack keeps
    them as `pos_encoding`, `rotary` and `relative_bias` (the names its weights are saved under)."""

    encoding: nn.Module | None = None  # EMBEDDINGS: X (B, L, D), offset -> X + P, then dropout
    rotary: nn.Module | None = None  # QUERIES_KEYS: a RotaryEmbedding shared by the stack's self-attentions
    bias: nn.Module | None = None  # SCORES: (q_pos, k_pos) -> (1, H, Lq, Lk), one module shared by the layers


class PositionScheme:
    """One position scheme. Subclasses set the class attributes and override what applies to them.

    Attributes:
        name: the name a config gives (`TransformerConfig.positions`).
        enters: one of ENTRIES.
        Options: the scheme's config block, a frozen dataclass (`TransformerConfig.position_options` holds it
            as a dict in config.json).
        bounded: positions past `max_len` do not exist (a learned table), so outputs are capped there.
        marian: a Hugging Face MarianMTModel holds it (fixed sinusoids), so `attnlab export hf` takes it.
        ct2: how CTranslate2's Transformer spec holds it (docs/translators.md), or None where it cannot;
            `ct2_refusal` then says why.
        view: what its figure draws: "bias" (per-head score biases), "angles" (rotation angles) or None.
        images: a Vision Transformer's patches can take it (`grid_table`; `attnlab.models.vit`).
    """

    name: ClassVar[str] = ""
    enters: ClassVar[str] = NOTHING
    Options: ClassVar[type] = NoOptions
    bounded: ClassVar[bool] = False
    marian: ClassVar[bool] = False
    ct2: ClassVar[str | None] = None
    ct2_refusal: ClassVar[str] = "CTranslate2's Transformer spec has no such scheme"
    view: ClassVar[str | None] = None
    images: ClassVar[bool] = False

    # -- config -------------------------------------------------------------------------------------
    def options(self, values: Mapping[str, Any] | None = None) -> Any:
        """The scheme's config block from a dict (defaults for what it lacks); ValueError (one line) for
        keys it does not know or values of the wrong type."""
        values = dict(values or {})
        known = [f.name for f in fields(self.Options)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(
                f"positions={self.name!r} takes the options {known or 'none'}, got {unknown}; "
                f"drop them or pick the scheme they belong to"
            )
        check_field_types(self.Options, values)
        return self.Options(**values)

    def options_dict(self, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The block as config.json keeps it: every option, defaults filled in."""
        return asdict(self.options(values))

    def check(self, options: Any, num_hiddens: int, num_heads: int) -> None:
        """ValueError (one line) when `options` do not fit a model of this width and head count."""

    # -- model --------------------------------------------------------------------------------------
    def build(self, options: Any, shape: StackShape) -> StackPositions:
        """The modules of one stack (the encoder's or the decoder's; `shape.causal` says which)."""
        return StackPositions()

    # -- images -------------------------------------------------------------------------------------
    def check_grid(self, num_hiddens: int) -> None:
        """ValueError (one line) when a Vision Transformer of width `num_hiddens` cannot take the scheme."""

    def grid_table(self, rows: int, columns: int, num_hiddens: int) -> Tensor:
        """A Vision Transformer's positions: one row for its class token, then one per patch of a rows x columns
        grid in row-major order; an nn.Parameter where they are learned (a weight), else a fixed tensor.

        Shape: -> (1, 1 + rows * columns, D).
        """
        raise ValueError(f"positions={self.name!r} has no form for image patches")

    # -- export -------------------------------------------------------------------------------------
    def ct2_options(self, options: Any, head_dim: int) -> dict[str, Any]:
        """Keyword options of CTranslate2's encoder and decoder specs for this scheme."""
        return {}

    def ct2_write(self, spec, stack) -> None:
        """Write `stack`'s positions (an attnlab encoder or decoder) into its CTranslate2 stack spec."""

    # -- view ---------------------------------------------------------------------------------------
    def maps(self, model, source_len: int, target_len: int) -> dict[str, Any]:
        """What the scheme adds per head for these lengths, as plain numbers (GET /api/positions adds
        `scheme` and `num_heads`); {} for a scheme that adds nothing per head."""
        return {}

    def numbers(self, model, source_len: int, target_len: int) -> int:
        """How many numbers `maps` returns for these lengths (a server bounds its answer with it)."""
        return 0

    def caption(self, maps: Mapping[str, Any], head: int) -> str:
        """The line a figure of `maps` prints for `head`."""
        return f"positions: {self.name}: nothing is added per head"


def bias_maps(bias: nn.Module, length: int, causal: bool) -> list[list[list[float | None]]]:
    """(H, L, L) nested lists of `bias(positions, positions)`, keys after the query None when causal."""
    pos = torch.arange(length)
    with torch.no_grad():
        values = bias(pos, pos)[0].double()  # (H, L, L); float64 so the rounded numbers print as such
    out = (torch.round(values, decimals=DECIMALS) + 0.0).tolist()  # + 0.0: -0.0 becomes 0.0
    if causal:
        for head in out:
            for i, row in enumerate(head):
                row[i + 1 :] = [None] * (length - i - 1)
    return out


def stack_bias_maps(model, source_len: int, target_len: int) -> dict[str, Any]:
    """encoder_self (H, S, S) and decoder_self (H, T, T) biases of a model whose stacks bias their scores."""
    return {
        "encoder_self": bias_maps(model.encoder.relative_bias, source_len, causal=False),
        "decoder_self": bias_maps(model.decoder.relative_bias, target_len, causal=True),
    }


CT2_TABLE_ROWS = 1024  # positions exported for table-less models (whatever their max_len)
