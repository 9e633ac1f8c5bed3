"""The encoder–decoder Transformer of "Attention Is All You Need", assembled from `attnlab.attention`.

    src (B, S) -> embed * sqrt(D) + positions -> N x [self-attention, FFN] -> memory (B, S, D)
    tgt (B, T) -> embed * sqrt(D) + positions -> N x [causal self-attention, cross-attention, FFN]
               -> dense -> logits (B, T, V)

Post-norm (`LayerNorm(x + sublayer(x))`, the paper and the book) by default; `norm_first=True` gives the
pre-norm variant (`x + sublayer(LayerNorm(x))`, easier to train deep) and then each stack ends with a final
LayerNorm, as `torch.nn.Transformer` does.

Decoding protocol (see ARCHITECTURE.md): `start_decoding` encodes once and opens one KVCache per attention
module of the decoder — self-attention caches grow by the new step, cross-attention caches hold the
encoder's keys/values projected once per sentence — so `decode_step` costs O(t) per token instead of
re-running the whole prefix.

Recorded attention (`record_attention(model)`) is named `encoder.blocks.{i}.attention`,
`decoder.blocks.{i}.self_attention` and `decoder.blocks.{i}.cross_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.attention import KVCache, MultiHeadAttention, PositionalEncoding
from attnlab.attention.heads import merge_pruned, prune_heads

from .config import TransformerConfig

__all__ = [
    "TransformerConfig",
    "make_activation",
    "PositionWiseFFN",
    "AddNorm",
    "Sublayer",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerDecoder",
    "Transformer",
    "TransformerState",
]


def make_activation(name: str) -> nn.Module:
    """FFN nonlinearity by config name: relu (paper), swish/silu (Marian), gelu (exact, as HF's "gelu")."""
    return {"relu": nn.ReLU, "swish": nn.SiLU, "silu": nn.SiLU, "gelu": nn.GELU}[name]()


class PositionWiseFFN(nn.Module):
    """The same two-layer MLP applied at every position: dense2(act(dense1(X))), act = relu by default.

    Shape: X (B, L, D) -> (B, L, D).
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, activation: str = "relu"):
        super().__init__()
        self.dense1 = nn.Linear(num_hiddens, ffn_num_hiddens)
        self.activation = make_activation(activation)
        self.dense2 = nn.Linear(ffn_num_hiddens, num_hiddens)

    def forward(self, X: Tensor) -> Tensor:
        return self.dense2(self.activation(self.dense1(X)))


class AddNorm(nn.Module):
    """The book's residual connection with layer normalization: `LayerNorm(X + dropout(Y))`.

    Shape: X (B, L, D), Y (B, L, D) -> (B, L, D).

    Examples:
        >>> import torch
        >>> add_norm = AddNorm(4, dropout=0.5).eval()
        >>> add_norm(torch.ones(2, 3, 4), torch.ones(2, 3, 4)).shape
        torch.Size([2, 3, 4])
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(num_hiddens)

    def forward(self, X: Tensor, Y: Tensor) -> Tensor:
        return self.ln(X + self.dropout(Y))


class Sublayer(AddNorm):
    """A sublayer (attention or FFN) with its residual connection, post- or pre-norm.

    Post-norm (the paper, the book): `AddNorm(X, sublayer(X))` = `LayerNorm(X + dropout(sublayer(X)))`.
    Pre-norm (`norm_first`): `X + dropout(sublayer(LayerNorm(X)))`: the sublayer must see the normalized
    input, which is why it is passed as a function rather than as its output.

    Shape: X (B, L, D); sublayer: (B, L, D) -> (B, L, D).
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, norm_first: bool = False):
        super().__init__(num_hiddens, dropout)
        self.norm_first = norm_first

    def forward(self, X: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:  # type: ignore[override]
        if self.norm_first:
            return X + self.dropout(sublayer(self.ln(X)))
        return super().forward(X, sublayer(X))


class TransformerEncoderBlock(nn.Module):
    """Self-attention then FFN, each a `Sublayer` (residual + LayerNorm, post- or pre-norm).

    Shape: X (B, S, D), valid_lens (B,) -> (B, S, D). Padded keys (positions >= valid_lens) are hidden.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        norm_first: bool = False,
        window: int | None = None,
    ):
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias, window=window)
        self.addnorm1 = Sublayer(num_hiddens, dropout, norm_first)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.addnorm2 = Sublayer(num_hiddens, dropout, norm_first)

    def forward(self, X: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        X = self.addnorm1(X, lambda x: self.attention(x, x, x, valid_lens))
        return self.addnorm2(X, self.ffn)


class TransformerDecoderBlock(nn.Module):
    """Causal self-attention, cross-attention over the encoder memory, FFN; each a `Sublayer`.

    Shape: X (B, t, D), memory (B, S, D), src_valid_lens (B,) -> (B, t, D).
    With caches, X holds only the new steps; `self_cache` grows by t, `cross_cache` is filled once.
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        norm_first: bool = False,
    ):
        super().__init__()
        self.self_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias, causal=True)
        self.addnorm1 = Sublayer(num_hiddens, dropout, norm_first)
        self.cross_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias)
        self.addnorm2 = Sublayer(num_hiddens, dropout, norm_first)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.addnorm3 = Sublayer(num_hiddens, dropout, norm_first)

    def forward(
        self,
        X: Tensor,
        memory: Tensor,
        src_valid_lens: Tensor | None = None,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> Tensor:
        # Causal masking is bottom-right aligned in MultiHeadAttention, so with a cache the new queries
        # see every cached step plus the new ones up to themselves.
        X = self.addnorm1(X, lambda x: self.self_attention(x, x, x, cache=self_cache))
        X = self.addnorm2(X, lambda x: self.cross_attention(x, memory, memory, src_valid_lens, cache=cross_cache))
        return self.addnorm3(X, self.ffn)


def _embedding(vocab_size: int, num_hiddens: int) -> nn.Embedding:
    # N(0, D^-1/2) as in fairseq/tensor2tensor: after the sqrt(D) scale the embeddings have unit variance,
    # comparable to the positional encodings, and a tied output projection starts with small logits.
    emb = nn.Embedding(vocab_size, num_hiddens)
    nn.init.normal_(emb.weight, std=num_hiddens**-0.5)
    return emb


class TransformerEncoder(nn.Module):
    """Embedding * sqrt(D) + positional encoding, then `num_layers` encoder blocks.

    Shape: X (B, S) token ids, valid_lens (B,) -> memory (B, S, D).
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_layers: int,
        dropout: float = 0.0,
        *,
        bias: bool = True,
        norm_first: bool = False,
        window: int | None = None,
        max_len: int = 1024,
        learned_positions: bool = False,
        embedding: nn.Embedding | None = None,
        embed_scale: float | None = None,
        pos_layout: str = "interleaved",
    ):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embed_scale = math.sqrt(num_hiddens) if embed_scale is None else embed_scale
        self.embedding = embedding if embedding is not None else _embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(
            num_hiddens, dropout, max_len, learned=learned_positions, layout=pos_layout
        )
        self.blocks = nn.ModuleList(
            TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, bias, norm_first, window)
            for _ in range(num_layers)
        )
        # Pre-norm leaves the residual stream un-normalized: normalize once at the end.
        self.final_norm = nn.LayerNorm(num_hiddens) if norm_first else nn.Identity()

    def forward(self, X: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        X = self.pos_encoding(self.embedding(X) * self.embed_scale)
        for block in self.blocks:
            X = block(X, valid_lens)
        return self.final_norm(X)


class TransformerDecoder(nn.Module):
    """Embedding * sqrt(D) + positional encoding (from `offset`), `num_layers` decoder blocks, dense.

    Shape: X (B, t) token ids, memory (B, S, D), src_valid_lens (B,) -> logits (B, t, V).
    `caches`: one (self_cache, cross_cache) pair per block for incremental decoding; `offset` is the
    absolute position of X[:, 0] (the number of cached steps).
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_layers: int,
        dropout: float = 0.0,
        *,
        bias: bool = True,
        norm_first: bool = False,
        max_len: int = 1024,
        learned_positions: bool = False,
        embedding: nn.Embedding | None = None,
        embed_scale: float | None = None,
        pos_layout: str = "interleaved",
    ):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embed_scale = math.sqrt(num_hiddens) if embed_scale is None else embed_scale
        self.embedding = embedding if embedding is not None else _embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(
            num_hiddens, dropout, max_len, learned=learned_positions, layout=pos_layout
        )
        self.blocks = nn.ModuleList(
            TransformerDecoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, bias, norm_first)
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(num_hiddens) if norm_first else nn.Identity()
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def forward(
        self,
        X: Tensor,
        memory: Tensor,
        src_valid_lens: Tensor | None = None,
        caches: list[tuple[KVCache, KVCache]] | None = None,
        offset: int = 0,
        targets_mask: Tensor | None = None,
    ) -> Tensor:
        X = self.pos_encoding(self.embedding(X) * self.embed_scale, offset=offset)
        for i, block in enumerate(self.blocks):
            self_cache, cross_cache = caches[i] if caches is not None else (None, None)
            X = block(X, memory, src_valid_lens, self_cache, cross_cache)
        X = self.final_norm(X)
        if targets_mask is not None:
            # Training: the (D x V) output layer, the largest matmul of a small model, and the loss's
            # log-softmax run on the N real positions only, not on the padding.
            X = X[targets_mask]  # (N, D)
        return self.dense(X)


@dataclass
class TransformerState:
    """Decoding state of one batch: encoder memory and a (self, cross) KVCache pair per decoder block.

    Shape: memory (B, S, D); src_valid_lens (B,) or None; cache tensors (B, H, L, Dh).
    """

    memory: Tensor
    src_valid_lens: Tensor | None
    caches: list[tuple[KVCache, KVCache]]

    @property
    def offset(self) -> int:
        """Number of target steps decoded so far (the length of the self-attention caches)."""
        return len(self.caches[0][0]) if self.caches else 0


class Transformer(nn.Module):
    """The encoder–decoder Transformer built from a `TransformerConfig`.

    Shape:
        src (B, S), tgt_in (B, T) token ids; src_valid_lens (B,) real source lengths (the rest is padding)
        -> logits (B, T, V).

    Examples:
        >>> import torch
        >>> model = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, num_hiddens=16,
        ...                                       num_heads=4, num_layers=2, ffn_num_hiddens=32))
        >>> src, tgt_in = torch.randint(3, 10, (2, 5)), torch.randint(3, 12, (2, 4))
        >>> model(src, tgt_in, torch.tensor([5, 3])).shape   # (B, T, V)
        torch.Size([2, 4, 12])
        >>> sorted(model.attention_kinds())                   # the maps `attnlab.explain` draws
        ['cross', 'decoder_self', 'encoder_self']
    """

    MODEL_TYPE = "transformer"
    # The attention maps this model produces, by kind -> the recorded modules of that kind in layer
    # order (see `attention_kinds`); `attnlab.explain` groups recordings by this, not by name matching.
    ATTENTION_KINDS = ("encoder_self", "decoder_self", "cross")

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise ValueError(
                f"Transformer expects a TransformerConfig, got {type(config).__name__}; "
                f"use TransformerConfig.from_dict(d) for a dict"
            )
        self.config = c = config
        shared = _embedding(c.src_vocab_size, c.num_hiddens) if c.share_embeddings else None
        common: dict[str, Any] = dict(
            bias=c.bias,
            norm_first=c.norm_first,
            max_len=c.max_len,
            learned_positions=c.learned_positions,
            embedding=shared,
            embed_scale=c.embedding_scale,
            pos_layout=c.pos_layout,
        )
        self.encoder = TransformerEncoder(
            c.src_vocab_size,
            c.num_hiddens,
            c.ffn_num_hiddens,
            c.num_heads,
            c.num_layers,
            c.dropout,
            window=c.window,
            **common,
        )
        self.decoder = TransformerDecoder(
            c.tgt_vocab_size, c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.num_layers, c.dropout, **common
        )
        if shared is not None or c.tie_output:
            # Tying as in the paper (section 3.4): the output projection reuses the (target) embedding.
            self.decoder.dense.weight = self.decoder.embedding.weight
        if c.activation != "relu":  # imported models (Marian: swish); blocks build relu FFNs
            for m in self.modules():
                if isinstance(m, PositionWiseFFN):
                    m.activation = make_activation(c.activation)
        if c.pruned_heads:  # a pruned model: rebuild its smaller projections before weights are loaded
            prune_heads(self, c.pruned_heads)

    def prune_heads(self, heads: dict[str, list[int]]) -> None:
        """Remove heads for good: {attention module name: indices of its current heads}. The config
        records them (as original indices), so the pruned model saves and loads like any other."""
        pruned = merge_pruned(self.config.pruned_heads, heads, self.config.num_heads)
        prune_heads(self, heads)
        self.config.pruned_heads = pruned

    @property
    def max_target_positions(self) -> int | None:
        """Decoder positions the model has: the learned table's rows, or None (sinusoids never run out)."""
        return self.config.max_len if self.config.learned_positions else None

    def attention_kinds(self) -> dict[str, list[nn.Module]]:
        """kind -> attention modules of that kind, in layer order: encoder_self (Ls x Ls), decoder_self
        (Lt x Lt, causal) and cross (Lt x Ls, decoder queries over the source)."""
        return {
            "encoder_self": [b.get_submodule("attention") for b in self.encoder.blocks],
            "decoder_self": [b.get_submodule("self_attention") for b in self.decoder.blocks],
            "cross": [b.get_submodule("cross_attention") for b in self.decoder.blocks],
        }

    def forward(
        self, src: Tensor, tgt_in: Tensor, src_valid_lens: Tensor | None = None, targets_mask: Tensor | None = None
    ) -> Tensor:
        """Logits (B, T, V); with `targets_mask` (B, T) bool, only the N rows where it is True, (N, V)
        in row-major order (the Trainer passes the real target positions: `attnlab.loss.target_mask`)."""
        _check_tokens(src, tgt_in, src_valid_lens)
        if targets_mask is not None and (targets_mask.dtype != torch.bool or targets_mask.shape != tgt_in.shape):
            raise ValueError(
                f"targets_mask must be a bool tensor shaped like tgt_in {tuple(tgt_in.shape)}, "
                f"got {targets_mask.dtype} {tuple(targets_mask.shape)}"
            )
        memory = self.encoder(src, src_valid_lens)
        return self.decoder(tgt_in, memory, src_valid_lens, targets_mask=targets_mask)

    # -- decoding protocol -------------------------------------------------------------------------
    def start_decoding(self, src: Tensor, src_valid_lens: Tensor | None = None) -> TransformerState:
        """Encode once; open an empty growing self-attention cache and a static cross-attention cache
        per decoder block (the cross cache is filled by the first `decode_step`)."""
        _check_tokens(src, None, src_valid_lens)
        memory = self.encoder(src, src_valid_lens)
        caches = [(KVCache(), KVCache(static=True)) for _ in self.decoder.blocks]
        return TransformerState(memory, src_valid_lens, caches)

    def decode_step(self, tgt: Tensor, state: TransformerState) -> tuple[Tensor, TransformerState]:
        """Run the new target tokens tgt (B, t) against the cache; returns logits (B, t, V) and the
        state, updated in place (positions continue at `state.offset`)."""
        if tgt.dim() != 2 or tgt.shape[0] != state.memory.shape[0]:
            raise ValueError(f"decode_step expects tgt of shape ({state.memory.shape[0]}, t), got {tuple(tgt.shape)}")
        logits = self.decoder(tgt, state.memory, state.src_valid_lens, state.caches, offset=state.offset)
        if self.config.suppress_tokens:  # e.g. Marian's <pad>, which generate() forbids (bad_words_ids)
            logits[..., self.config.suppress_tokens] = float("-inf")
        return logits, state

    def reorder_state(self, state: TransformerState, index: Tensor, same_sources: bool = False) -> TransformerState:
        """Keep (and repeat) the batch rows named by index (B',) — beam search's reshuffle.

        same_sources: every new row i comes from a row of the same source sentence as row i had
        (beams reordered within their sentence), so the encoder memory, the source lengths and the
        static cross-attention keys/values are already right and only the growing self-attention
        caches are reordered (fairseq's "beamable" state).
        """
        for self_cache, cross_cache in state.caches:
            self_cache.reorder(index)
            if not same_sources:
                cross_cache.reorder(index)
        if same_sources:
            return state
        lens = None if state.src_valid_lens is None else state.src_valid_lens.index_select(0, index)
        return TransformerState(state.memory.index_select(0, index), lens, state.caches)


def _check_tokens(src: Tensor, tgt: Tensor | None, valid_lens: Tensor | None) -> None:
    if src.dim() != 2 or src.dtype.is_floating_point:
        raise ValueError(f"src must be integer token ids of shape (B, S), got {tuple(src.shape)} {src.dtype}")
    if tgt is not None and (tgt.dim() != 2 or tgt.shape[0] != src.shape[0]):
        raise ValueError(f"tgt_in must have shape ({src.shape[0]}, T), got {tuple(tgt.shape)}")
    if valid_lens is not None and tuple(valid_lens.shape) != (src.shape[0],):
        raise ValueError(f"src_valid_lens must have shape ({src.shape[0]},), got {tuple(valid_lens.shape)}")
