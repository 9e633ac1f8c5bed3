"""A faithful re-implementation (written by us) of the book's Transformer formulation, kept as a
benchmark baseline (*Dive into Deep Learning*, section "The Transformer Architecture").

What makes it the book's and not ours:
  - attention is the book's MultiHeadAttention (baselines/d2l_attention.py): explicit bmm, the -1e6
    masked softmax over `valid_lens` repeated per head, transpose_qkv / transpose_output reshapes;
  - the decoder's causal masking during training is `dec_valid_lens = arange(1, T + 1)` repeated to
    (B, T) and pushed through that same masked softmax (no boolean mask, no fused kernel);
  - PositionalEncoding precomputes P (1, max_len, D) and adds P[:, :L] (moved to X's device each call);
  - embeddings are scaled by sqrt(D); post-norm AddNorm = LayerNorm(dropout(Y) + X).

Module names follow the book (`blks`, `attention1`, `attention2`) and every parameter has the shape of
its counterpart in `attnlab.models.Transformer`, so `load_attnlab_weights` copies ours in (the parity
test in tests/test_benchmarks_baselines.py checks both compute the same logits).

Shape: src (B, S), tgt_in (B, T) token ids, src_valid_lens (B,) -> logits (B, T, V).
"""

import math

import torch
from torch import nn

from .d2l_attention import MultiHeadAttention


class PositionalEncoding(nn.Module):
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = torch.zeros((1, max_len, num_hiddens))
        X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens
        )
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        X = X + self.P[:, : X.shape[1], :].to(X.device)
        return self.dropout(X)


class PositionWiseFFN(nn.Module):
    def __init__(self, num_hiddens, ffn_num_hiddens):
        super().__init__()
        self.dense1 = nn.Linear(num_hiddens, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, num_hiddens)

    def forward(self, X):
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    def __init__(self, num_hiddens, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(num_hiddens)

    def forward(self, X, Y):
        return self.ln(self.dropout(Y) + X)


class TransformerEncoderBlock(nn.Module):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias=False):
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.addnorm2 = AddNorm(num_hiddens, dropout)

    def forward(self, X, valid_lens):
        Y = self.addnorm1(X, self.attention(X, X, X, valid_lens))
        return self.addnorm2(Y, self.ffn(Y))


class TransformerEncoder(nn.Module):
    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, use_bias=False):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout)
        self.blks = nn.Sequential()
        for i in range(num_blks):
            self.blks.add_module(
                "block" + str(i), TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias)
            )

    def forward(self, X, valid_lens):
        # Embedding values are multiplied by sqrt(D) before the positional encoding is added (the book).
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        for blk in self.blks:
            X = blk(X, valid_lens)
        return X


class TransformerDecoderBlock(nn.Module):
    """The i-th decoder block; `state` = [enc_outputs, enc_valid_lens, per-block cached key_values]."""

    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, i, use_bias=False):
        super().__init__()
        self.i = i
        self.attention1 = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.attention2 = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.addnorm2 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.addnorm3 = AddNorm(num_hiddens, dropout)

    def forward(self, X, state):
        enc_outputs, enc_valid_lens = state[0], state[1]
        if state[2][self.i] is None:
            key_values = X
        else:
            key_values = torch.cat((state[2][self.i], X), dim=1)
        state[2][self.i] = key_values
        if self.training:
            batch_size, num_steps, _ = X.shape
            # (B, T): query t sees keys [0, t + 1) -- the book's causal mask, as valid lengths.
            dec_valid_lens = torch.arange(1, num_steps + 1, device=X.device).repeat(batch_size, 1)
        else:
            dec_valid_lens = None
        X2 = self.attention1(X, key_values, key_values, dec_valid_lens)
        Y = self.addnorm1(X, X2)
        Y2 = self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)
        Z = self.addnorm2(Y, Y2)
        return self.addnorm3(Z, self.ffn(Z)), state


class TransformerDecoder(nn.Module):
    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, use_bias=False):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.num_blks = num_blks
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout)
        self.blks = nn.Sequential()
        for i in range(num_blks):
            self.blks.add_module(
                "block" + str(i), TransformerDecoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, i, use_bias)
            )
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens):
        return [enc_outputs, enc_valid_lens, [None] * self.num_blks]

    def forward(self, X, state):
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        for blk in self.blks:
            X, state = blk(X, state)
        return self.dense(X), state


class Transformer(nn.Module):
    """The book's EncoderDecoder around its Transformer encoder and decoder (teacher forcing)."""

    def __init__(
        self, src_vocab_size, tgt_vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, use_bias=False
    ):
        super().__init__()
        args = (num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, use_bias)
        self.encoder = TransformerEncoder(src_vocab_size, *args)
        self.decoder = TransformerDecoder(tgt_vocab_size, *args)

    def forward(self, src, tgt_in, src_valid_lens=None):
        enc_outputs = self.encoder(src, src_valid_lens)
        state = self.decoder.init_state(enc_outputs, src_valid_lens)
        return self.decoder(tgt_in, state)[0]


def from_attnlab_config(config, dropout=None):
    """The book's model with the shapes of an `attnlab.models.TransformerConfig` (post-norm only)."""
    if config.norm_first or config.share_embeddings or config.window is not None or config.positions != "sinusoidal":
        raise ValueError(
            "the book's Transformer is post-norm with separate embeddings, full attention and "
            "sinusoidal positions; got a config that asks for something else"
        )
    return Transformer(
        config.src_vocab_size,
        config.tgt_vocab_size,
        config.num_hiddens,
        config.ffn_num_hiddens,
        config.num_heads,
        config.num_layers,
        config.dropout if dropout is None else dropout,
        use_bias=config.bias,
    )


def load_attnlab_weights(book: Transformer, ours: nn.Module) -> None:
    """Copy an `attnlab.models.Transformer`'s parameters into the book's model (renaming only)."""
    renamed = {}
    for name, tensor in ours.state_dict().items():
        parts = name.split(".")
        if len(parts) > 2 and parts[1] == "blocks":
            parts[1], parts[2] = "blks", "block" + parts[2]
        parts = [{"self_attention": "attention1", "cross_attention": "attention2"}.get(p, p) for p in parts]
        renamed[".".join(parts)] = tensor
    book.load_state_dict(renamed, strict=True)
