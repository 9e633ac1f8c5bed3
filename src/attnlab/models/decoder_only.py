"""A decoder-only translator: source and target as one sequence, one stack of self-attention blocks.

    src (B, S), tgt_in (B, T) -> [x_1 .. x_S <eos> | <bos> y_1 .. y_T-1] (B, S+T, D)
        token embedding (source or target table) * sqrt(D) + segment + positions
        -> N x [self-attention under the prefix mask, FFN] -> target part (B, T, D) -> dense -> logits (B, T, V)

The target's <bos> is the separator: it opens the target segment, and the source and target tokens
have their own embedding tables (one table when `share_embeddings`) plus a learned segment vector.
Only the target positions have an output, so the loss is on the target part only. Positions run on
across the separator per sentence: a source of s real tokens puts target step t at position s + t,
whatever the batch's padding.

Masking (True = may attend): a key at a padded source slot is never seen. Causal (`prefix_lm=False`):
every token sees the tokens before it and itself. Prefix-LM (`prefix_lm=True`): source tokens see
every source token (bidirectional, as an encoder) and never a target token; target tokens see the
whole source and the target up to themselves.

Decoding protocol (ARCHITECTURE.md): `start_decoding` runs the source once and keeps every block's
keys/values in a growing `KVCache`; `decode_step` appends the new target steps. Beam search reorders
the caches row by row (there is no separate memory to share across a sentence's hypotheses).
Recorded attention is `blocks.{i}.attention` over the whole sequence (B, H, S+T, S+T);
`attention_views` cuts it into the encoder–decoder's kinds for the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from attnlab.attention import KVCache, MultiHeadAttention
from attnlab.attention.positions import PositionalEncoding, SinusoidalOptions, StackShape, get_scheme
from attnlab.models.config import ConfigMixin, check_translator_config
from attnlab.models.transformer_layers import PositionWiseFFN, Sublayer, token_embedding


@dataclass
class DecoderOnlyConfig(ConfigMixin):
    """Hyperparameters of `DecoderOnly`; the fields it shares with `TransformerConfig` mean the same."""

    MODEL_TYPE = "decoder-only"

    src_vocab_size: int  # V_src, source vocabulary size
    tgt_vocab_size: int  # V, target vocabulary size
    num_hiddens: int = 512  # D, model width
    num_heads: int = 8  # H, attention heads; must divide num_hiddens
    num_layers: int = 12  # N, blocks (twice the Transformer's per-stack count: about its parameters)
    ffn_num_hiddens: int = 2048  # inner width of the position-wise FFN
    dropout: float = 0.1  # residual, embedding and attention-weight dropout
    norm_first: bool = False  # pre-norm blocks + a final LayerNorm; False = post-norm
    share_embeddings: bool = False  # one table for source and target tokens, tied to the output projection
    max_len: int = 1024  # sinusoid rows precomputed (longer sequences are computed on the fly)
    bias: bool = True  # attention projection biases
    prefix_lm: bool = False  # source tokens attend to each other both ways (prefix-LM); False = causal

    def __post_init__(self):
        check_translator_config(self)


def prefix_mask(src_lens: Tensor, S: int, q_slots: Tensor, k_slots: Tensor, prefix_lm: bool) -> Tensor:
    """Which keys each query may see in the one sequence [S source slots | target slots].

    Args:
        src_lens: (B,) real source tokens per row (slots at or past it are padding).
        S: source slots (the padded source width); slots >= S are target steps.
        q_slots (Lq,), k_slots (Lk,): the slots of the queries and keys.
        prefix_lm: source queries see every real source key; False: only those at or before them.

    Shape: -> (B, Lq, Lk) bool, True = may attend.

    Examples:
        >>> m = prefix_mask(torch.tensor([2]), 2, torch.arange(4), torch.arange(4), prefix_lm=True)
        >>> m[0].int()   # source 0-1 see each other, never the target 2-3; targets are causal
        tensor([[1, 1, 0, 0],
                [1, 1, 0, 0],
                [1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    q_tgt, k_tgt = q_slots >= S, k_slots >= S  # (Lq,), (Lk,)
    causal = k_slots[None, :] <= q_slots[:, None]  # (Lq, Lk)
    src_key = ~k_tgt[None, :] & (q_tgt[:, None] | causal | prefix_lm)
    tgt_key = k_tgt[None, :] & q_tgt[:, None] & causal
    real = k_tgt[None, :] | (k_slots[None, :] < src_lens[:, None])  # (B, Lk): padded source keys hidden
    return (src_key | tgt_key)[None] & real[:, None, :]


class DecoderOnlyBlock(nn.Module):
    """Masked self-attention then FFN, each a `Sublayer` (residual + LayerNorm, post- or pre-norm).

    Shape: X (B, L, D), mask (B, L, Lk) bool -> (B, L, D); with a cache, X holds the new steps only and
    the cache grows by them (Lk = cached + new).
    """

    def __init__(self, c: DecoderOnlyConfig):
        super().__init__()
        self.attention = MultiHeadAttention(c.num_hiddens, c.num_heads, c.dropout, bias=c.bias)
        self.addnorm1 = Sublayer(c.num_hiddens, c.dropout, c.norm_first)
        self.ffn = PositionWiseFFN(c.num_hiddens, c.ffn_num_hiddens)
        self.addnorm2 = Sublayer(c.num_hiddens, c.dropout, c.norm_first)

    def forward(self, X: Tensor, mask: Tensor, cache: KVCache | None = None) -> Tensor:
        X = self.addnorm1(X, lambda x: self.attention(x, x, x, mask=mask, cache=cache))
        return self.addnorm2(X, self.ffn)


@dataclass
class DecoderOnlyState:
    """Decoding state: one growing KVCache per block over [source | target so far].

    Shape: caches (R, H, S + steps, Dh); src_lens (R,); R rows (sentences, or B * beam hypotheses).
    """

    caches: list[KVCache]
    src_lens: Tensor
    S: int  # source slots (padded width) at the head of every cache
    steps: int = 0  # target steps decoded so far

    @property
    def offset(self) -> int:
        return self.steps

    def reserve(self, steps: int) -> None:
        """Size the caches once for `steps` target steps after the source (`KVCache.reserve`)."""
        for cache in self.caches:
            cache.reserve(self.S + steps)


class DecoderOnly(nn.Module):
    """A decoder-only translator built from a `DecoderOnlyConfig` (see the module docstring).

    Shape: src (B, S), tgt_in (B, T) token ids; src_valid_lens (B,) -> logits (B, T, V); with
    `targets_mask` (B, T) bool, only its N rows, (N, V) (the Trainer's path).

    Examples:
        >>> import torch
        >>> model = DecoderOnly(DecoderOnlyConfig(10, 12, num_hiddens=16, num_heads=2, num_layers=2,
        ...                                       ffn_num_hiddens=32, prefix_lm=True))
        >>> model(torch.randint(3, 10, (2, 5)), torch.randint(3, 12, (2, 4)), torch.tensor([5, 3])).shape
        torch.Size([2, 4, 12])
    """

    MODEL_TYPE = "decoder-only"
    ATTENTION_KINDS = ("decoder_self",)

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        if not isinstance(config, DecoderOnlyConfig):
            raise ValueError(f"DecoderOnly expects a DecoderOnlyConfig, got {type(config).__name__}")
        self.config = c = config
        self.scale = math.sqrt(c.num_hiddens)
        self.src_embedding = token_embedding(c.src_vocab_size, c.num_hiddens)
        self.tgt_embedding = (
            self.src_embedding if c.share_embeddings else token_embedding(c.tgt_vocab_size, c.num_hiddens)
        )
        self.segment = nn.Parameter(torch.zeros(2, c.num_hiddens))  # source, target
        # the registry's sinusoids (no weights: checkpoints hold none), gathered at each token's position
        shape = StackShape(c.num_hiddens, c.num_heads, 0.0, c.max_len, causal=True)
        built = get_scheme("sinusoidal").build(SinusoidalOptions(), shape)
        self.pos_encoding = cast(PositionalEncoding, built.encoding)  # the scheme enters at the embeddings
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(DecoderOnlyBlock(c) for _ in range(c.num_layers))
        self.final_norm = nn.LayerNorm(c.num_hiddens) if c.norm_first else nn.Identity()
        self.dense = nn.Linear(c.num_hiddens, c.tgt_vocab_size)
        if c.share_embeddings:
            self.dense.weight = self.tgt_embedding.weight

    max_target_positions = None  # sinusoids never run out

    def attention_kinds(self) -> dict[str, list[nn.Module]]:
        """decoder_self -> every block's self-attention over the whole sequence, in layer order."""
        return {"decoder_self": [b.get_submodule("attention") for b in self.blocks]}

    @staticmethod
    def attention_views(maps: dict[str, Tensor], src_len: int) -> dict[str, Tensor]:
        """Recorded (N, H, S+T, S+T) maps -> the encoder–decoder's kinds: encoder_self (source queries over
        source keys), decoder_self (target over target) and cross (target queries over the source)."""
        w, S = maps["decoder_self"], src_len
        return {"encoder_self": w[..., :S, :S], "decoder_self": w[..., S:, S:], "cross": w[..., S:, :S]}

    def _positions(self, pos: Tensor) -> Tensor:
        """(B, L) positions -> (B, L, D) sinusoids (past max_len computed on the fly, as the scheme does)."""
        return self.pos_encoding.encoding(int(pos.max()) + 1, device=pos.device)[pos]

    def _embed(self, ids: Tensor, table: nn.Embedding, segment: int, pos: Tensor) -> Tensor:
        X = table(ids) * self.scale + self.segment[segment] + self._positions(pos).to(self.segment.dtype)
        return self.dropout(X)

    def _lens(self, src: Tensor, src_valid_lens: Tensor | None) -> Tensor:
        if src.dim() != 2 or src.dtype.is_floating_point:
            raise ValueError(f"src must be integer token ids of shape (B, S), got {tuple(src.shape)} {src.dtype}")
        if src_valid_lens is None:
            return torch.full((src.shape[0],), src.shape[1], dtype=torch.long, device=src.device)
        if tuple(src_valid_lens.shape) != (src.shape[0],):
            raise ValueError(f"src_valid_lens must have shape ({src.shape[0]},), got {tuple(src_valid_lens.shape)}")
        return src_valid_lens.to(device=src.device, dtype=torch.long)

    def forward(
        self, src: Tensor, tgt_in: Tensor, src_valid_lens: Tensor | None = None, targets_mask: Tensor | None = None
    ) -> Tensor:
        lens = self._lens(src, src_valid_lens)
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"tgt_in must have shape ({src.shape[0]}, T), got {tuple(tgt_in.shape)}")
        (B, S), T = src.shape, tgt_in.shape[1]
        dev = src.device
        src_pos = torch.arange(S, device=dev).expand(B, S)
        tgt_pos = lens[:, None] + torch.arange(T, device=dev)  # (B, T): positions run on past the real source
        X = torch.cat(
            [self._embed(src, self.src_embedding, 0, src_pos), self._embed(tgt_in, self.tgt_embedding, 1, tgt_pos)],
            dim=1,
        )  # (B, S+T, D)
        slots = torch.arange(S + T, device=dev)
        mask = prefix_mask(lens, S, slots, slots, self.config.prefix_lm)  # (B, S+T, S+T)
        for block in self.blocks:
            X = block(X, mask)
        X = self.final_norm(X[:, S:])  # (B, T, D): only the target part has outputs
        if targets_mask is not None:
            X = X[targets_mask]  # (N, D)
        return self.dense(X)

    # -- decoding protocol -------------------------------------------------------------------------
    def start_decoding(self, src: Tensor, src_valid_lens: Tensor | None = None) -> DecoderOnlyState:
        """Run the source once, filling one cache per block with its keys/values."""
        lens = self._lens(src, src_valid_lens)
        B, S = src.shape
        slots = torch.arange(S, device=src.device)
        X = self._embed(src, self.src_embedding, 0, slots.expand(B, S))
        mask = prefix_mask(lens, S, slots, slots, self.config.prefix_lm)
        caches = [KVCache() for _ in self.blocks]
        for block, cache in zip(self.blocks, caches):
            X = block(X, mask, cache)
        return DecoderOnlyState(caches, lens, S)

    def decode_step(self, tgt: Tensor, state: DecoderOnlyState) -> tuple[Tensor, DecoderOnlyState]:
        """New target tokens tgt (R, t) -> logits (R, t, V); the caches grow by t steps."""
        R, t = tgt.shape
        if tgt.dim() != 2 or state.src_lens.shape[0] != R:
            raise ValueError(f"decode_step expects tgt of shape ({state.src_lens.shape[0]}, t), got {tuple(tgt.shape)}")
        dev, S, done = tgt.device, state.S, state.steps
        steps = torch.arange(done, done + t, device=dev)
        X = self._embed(tgt, self.tgt_embedding, 1, state.src_lens[:, None] + steps)
        mask = prefix_mask(state.src_lens, S, S + steps, torch.arange(S + done + t, device=dev), self.config.prefix_lm)
        for block, cache in zip(self.blocks, state.caches):
            X = block(X, mask, cache)
        state.steps = done + t
        return self.dense(self.final_norm(X)), state

    def reorder_state(self, state: DecoderOnlyState, index: Tensor, same_sources: bool = False) -> DecoderOnlyState:
        """Keep (and repeat) the rows named by index (R',): finished sentences leaving, beams reshuffled."""
        for cache in state.caches:
            cache.reorder(index)
        state.src_lens = state.src_lens.index_select(0, index)
        return state


__all__ = ["DecoderOnly", "DecoderOnlyBlock", "DecoderOnlyConfig", "DecoderOnlyState", "prefix_mask"]
