"""The layers of the Transformer: FFN, residual sublayers, encoder/decoder blocks and stacks.

    src (B, S) -> embed * sqrt(D) + positions -> N x [self-attention, FFN] -> memory (B, S, D)
    tgt (B, T) -> embed * sqrt(D) + positions -> N x [causal self-attention, cross-attention, FFN]
               -> dense -> logits (B, T, V)

`attnlab.models.transformer` assembles them into the `Transformer` and re-exports every name here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch import Tensor, nn

from attnlab.attention import Dropout, KVCache, MultiHeadAttention, PositionalEncoding, PositionBias, RotaryEmbedding
from attnlab.attention.positions import StackShape, get_scheme
from attnlab.kernels.layer_norm import native_add_layer_norm

__all__ = [
    "make_activation",
    "PositionWiseFFN",
    "AddNorm",
    "Sublayer",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerDecoder",
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
        if type(self.activation) is nn.ReLU and getattr(self.dense1, "fuses_relu", False):
            return self.dense2(self.dense1(X, relu=True))  # int8: the ReLU in the layer's rescaling pass
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
        self.dropout = Dropout(dropout)
        self.ln = nn.LayerNorm(num_hiddens)

    def forward(self, X: Tensor, Y: Tensor) -> Tensor:
        if not (self.training and self.dropout.p > 0) and (out := native_add_layer_norm(X, Y, self.ln)) is not None:
            return out
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


class _Block(nn.Module):
    """What the encoder and decoder blocks share: their arguments, and sublayers of one width D with the
    same dropout and norm placement. `_build` (each block's own) creates the submodules in order from
    the factories `attention(**kw)`, `sublayer()` and `ffn()`. Every attention has `num_kv_heads` key/value
    heads (None = one per head); `rotary` (a shared `RotaryEmbedding`) rotates self-attention's q/k."""

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        norm_first: bool = False,
        window: int | None = None,
        num_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
    ):
        super().__init__()
        self._build(
            lambda **kw: MultiHeadAttention(
                num_hiddens, num_heads, dropout, bias=bias, num_kv_heads=num_kv_heads, **kw
            ),
            lambda: Sublayer(num_hiddens, dropout, norm_first),
            lambda: PositionWiseFFN(num_hiddens, ffn_num_hiddens),
            window,
            rotary,
        )

    def _build(self, attention, sublayer, ffn, window, rotary) -> None:
        raise NotImplementedError


class TransformerEncoderBlock(_Block):
    """Self-attention then FFN, each a `Sublayer` (residual + LayerNorm, post- or pre-norm).

    Arguments: num_hiddens, ffn_num_hiddens, num_heads, dropout, bias, norm_first, window (local attention),
    num_kv_heads, rotary.
    Shape: X (B, S, D), valid_lens (B,) -> (B, S, D). Padded keys (positions >= valid_lens) are hidden.
    `position_bias` (ALiBi, T5) is added to the self-attention scores.
    """

    def _build(self, attention, sublayer, ffn, window, rotary) -> None:
        self.attention = attention(window=window, rotary=rotary)
        self.addnorm1 = sublayer()
        self.ffn = ffn()
        self.addnorm2 = sublayer()

    def forward(self, X: Tensor, valid_lens: Tensor | None = None, position_bias: PositionBias | None = None) -> Tensor:
        X = self.addnorm1(X, lambda x: self.attention(x, x, x, valid_lens, position_bias=position_bias))
        return self.addnorm2(X, self.ffn)


class TransformerDecoderBlock(_Block):
    """Causal self-attention, cross-attention over the encoder memory, FFN; each a `Sublayer`.

    Arguments: num_hiddens, ffn_num_hiddens, num_heads, dropout, bias, norm_first (no window), num_kv_heads,
    rotary (self-attention only: cross-attention compares target and source positions, which RoPE,
    ALiBi and T5 leave to the content).
    Shape: X (B*beam, t, D), memory (B, S, D), src_valid_lens (B,) -> (B*beam, t, D).
    With caches, X holds only the new steps; `self_cache` grows by t, `cross_cache` is filled once.
    beam > 1: `beam` consecutive rows of X (hypotheses of one sentence) share one memory row ("beamable"
    cross-attention, see `MultiHeadAttention.forward`).
    """

    def _build(self, attention, sublayer, ffn, window, rotary) -> None:
        if window is not None:
            raise ValueError(f"the decoder has no local attention: window must be None, got {window}")
        self.self_attention = attention(causal=True, rotary=rotary)
        self.addnorm1 = sublayer()
        self.cross_attention = attention()
        self.addnorm2 = sublayer()
        self.ffn = ffn()
        self.addnorm3 = sublayer()

    def forward(
        self,
        X: Tensor,
        memory: Tensor,
        src_valid_lens: Tensor | None = None,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        beam: int = 1,
        position_bias: PositionBias | None = None,
    ) -> Tensor:
        # Causal masking is bottom-right aligned in MultiHeadAttention, so with a cache the new queries
        # see every cached step plus the new ones up to themselves.
        X = self.addnorm1(X, lambda x: self.self_attention(x, x, x, cache=self_cache, position_bias=position_bias))
        X = self.addnorm2(
            X, lambda x: self.cross_attention(x, memory, memory, src_valid_lens, cache=cross_cache, beam=beam)
        )
        return self.addnorm3(X, self.ffn)


def token_embedding(vocab_size: int, num_hiddens: int) -> nn.Embedding:
    # N(0, D^-1/2) as in fairseq/tensor2tensor: after the sqrt(D) scale the embeddings have unit variance,
    # comparable to the positional encodings, and a tied output projection starts with small logits.
    emb = nn.Embedding(vocab_size, num_hiddens)
    nn.init.normal_(emb.weight, std=num_hiddens**-0.5)
    return emb


class _TokenStack(nn.Module):
    """What the encoder and the decoder share: token embedding * scale (+ positional encoding), then
    `num_layers` blocks (`_block` builds one), then a final LayerNorm when pre-norm (which leaves the
    residual stream un-normalized).

    Keyword options: bias, norm_first, window (local self-attention, encoder only), max_len
    (positions), positions (a scheme's name, `attnlab.attention.positions`) and position_options (its
    block), num_kv_heads, embedding (a shared nn.Embedding), embed_scale (default sqrt(D)).

    Where positions enter is the scheme's to say (`PositionScheme.enters`); the stack keeps what it builds
    as `pos_encoding` (added to the embeddings: sinusoidal, learned), `rotary` (rotating q/k of every
    self-attention: rope) or `relative_bias` (added to every self-attention's scores, one module per stack
    shared by its layers: alibi, t5 — bidirectional in the encoder, causal in the decoder); none adds nothing.
    """

    bidirectional = True  # relative positions: both directions (encoder) or only the past (decoder)

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
        positions: str = "sinusoidal",
        position_options: dict | None = None,
        num_kv_heads: int | None = None,
        embedding: nn.Embedding | None = None,
        embed_scale: float | None = None,
    ):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.positions = positions
        self.embed_scale = math.sqrt(num_hiddens) if embed_scale is None else embed_scale
        self.embedding = embedding if embedding is not None else token_embedding(vocab_size, num_hiddens)
        scheme = get_scheme(positions)
        shape = StackShape(num_hiddens, num_heads, dropout, max_len, causal=not self.bidirectional)
        built = scheme.build(scheme.options(position_options), shape)
        # A module that adds to the embeddings exposes `encoding(L, offset)` as PositionalEncoding does.
        self.pos_encoding: PositionalEncoding | None = built.encoding  # type: ignore[assignment]
        self.embed_dropout = Dropout(dropout) if built.encoding is None else None
        self.rotary: RotaryEmbedding | None = built.rotary  # type: ignore[assignment]
        self.relative_bias = built.bias
        args = (num_hiddens, ffn_num_hiddens, num_heads, dropout, bias, norm_first, window, num_kv_heads, self.rotary)
        self.blocks = nn.ModuleList(self._block(*args) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(num_hiddens) if norm_first else nn.Identity()

    def _block(self, *args) -> nn.Module:
        raise NotImplementedError

    def embed(self, X: Tensor, offset: int = 0) -> Tensor:
        """Token ids (B, L) -> (B, L, D): embedding * scale (+ the positions from `offset` on)."""
        X = self.embedding(X) * self.embed_scale
        if self.pos_encoding is not None:
            return self.pos_encoding(X, offset=offset)
        assert self.embed_dropout is not None
        return self.embed_dropout(X)


class TransformerEncoder(_TokenStack):
    """Embedding * sqrt(D) + positional encoding, then `num_layers` encoder blocks.

    Shape: X (B, S) token ids, valid_lens (B,) -> memory (B, S, D).
    Arguments: vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers, dropout, and the
    keyword options of `_TokenStack` (bias, norm_first, window, max_len, positions, position_options,
    num_kv_heads, embedding, embed_scale).
    """

    def _block(self, *args) -> nn.Module:
        return TransformerEncoderBlock(*args)

    def forward(self, X: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        X = self.embed(X)
        for block in self.blocks:
            X = block(X, valid_lens, self.relative_bias)
        return self.final_norm(X)


class TransformerDecoder(_TokenStack):
    """Embedding * sqrt(D) + positional encoding (from `offset`), `num_layers` decoder blocks, dense.
    (The Transformer passes `TransformerConfig.decoder_depth`: a decoder may be shallower than its encoder.)

    Shape: X (B*beam, t) token ids, memory (B, S, D), src_valid_lens (B,) -> logits (B*beam, t, V).
    `caches`: one (self_cache, cross_cache) pair per block for incremental decoding; `offset` is the
    absolute position of X[:, 0] (the number of cached steps). Arguments as the encoder's (no window).
    """

    bidirectional = False

    def __init__(self, vocab_size: int, *args, **kwargs):
        super().__init__(vocab_size, *args, **kwargs)
        self.dense = nn.Linear(self.num_hiddens, vocab_size)

    def _block(self, *args) -> nn.Module:
        return TransformerDecoderBlock(*args)

    def forward(
        self,
        X: Tensor,
        memory: Tensor,
        src_valid_lens: Tensor | None = None,
        caches: list[tuple[KVCache, KVCache]] | None = None,
        offset: int = 0,
        targets_mask: Tensor | None = None,
        beam: int = 1,
    ) -> Tensor:
        X = self.embed(X, offset)
        for i, block in enumerate(self.blocks):
            self_cache, cross_cache = caches[i] if caches is not None else (None, None)
            X = block(X, memory, src_valid_lens, self_cache, cross_cache, beam, self.relative_bias)
        X = self.final_norm(X)
        if targets_mask is not None:
            # Training: the (D x V) output layer, the largest matmul of a small model, and the loss's
            # log-softmax run on the N real positions only, not on the padding.
            X = X[targets_mask]  # (N, D)
        return self.dense(X)
