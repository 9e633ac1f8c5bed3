"""The book's sequence-to-sequence model with Bahdanau attention.

Encoder: embedding + multi-layer GRU over the source. Decoder, one target step at a time:

    query   = previous top-layer hidden state s_{t-1}        (B, 1, h)
    context = AdditiveAttention(query, enc_outputs, enc_outputs, src_valid_lens)
    s_t     = GRU([context ; embed(y_{t-1})], s_{t-1});  logits_t = dense(s_t)

The encoder packs padded batches, so a sentence's final state (the decoder's initial state) is taken at
its own last token and batched translation equals one-by-one translation. Attention weights are
recorded, one (B, 1, 1, S) tensor per step, under the name `decoder.attention`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.attention import AdditiveAttention

from .config import ConfigMixin

__all__ = [
    "BahdanauConfig",
    "Seq2SeqEncoder",
    "Seq2SeqAttentionDecoder",
    "Seq2SeqState",
    "EncoderDecoder",
    "build_bahdanau",
]


@dataclass
class BahdanauConfig(ConfigMixin):
    """Hyperparameters of the Bahdanau `EncoderDecoder`; defaults are the book's."""

    MODEL_TYPE = "bahdanau"

    src_vocab_size: int  # source vocabulary size
    tgt_vocab_size: int  # V, target vocabulary size
    embed_size: int = 32  # token embedding width (encoder and decoder)
    num_hiddens: int = 32  # h, GRU hidden size, also the additive attention's hidden size
    num_layers: int = 2  # stacked GRU layers in encoder and decoder
    dropout: float = 0.1  # between GRU layers and on the attention weights

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "embed_size", "num_hiddens", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"BahdanauConfig.{name} must be a positive integer, got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"BahdanauConfig.dropout must lie in [0, 1), got {self.dropout}")


def _between(dropout: float, num_layers: int) -> float:
    # nn.GRU applies dropout only between layers (and warns about it for a single layer).
    return dropout if num_layers > 1 else 0.0


class Seq2SeqEncoder(nn.Module):
    """Embedding + multi-layer GRU (batch first).

    Shape: X (B, S) token ids, valid_lens (B,) -> outputs (B, S, h) (zeros at padding), state (layers, B, h).
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int, dropout: float = 0.0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, num_layers, dropout=_between(dropout, num_layers), batch_first=True)

    def forward(self, X: Tensor, valid_lens: Tensor | None = None) -> tuple[Tensor, Tensor]:
        embs = self.embedding(X)  # (B, S, E)
        if valid_lens is None:
            return self.rnn(embs)
        lengths = torch.as_tensor(valid_lens).to("cpu", torch.int64)
        if lengths.numel() and int(lengths.min()) < 1:
            raise ValueError(f"every source needs at least one token, got valid_lens {lengths.tolist()}")
        # Packing stops each GRU at its own sentence end: the final state then ignores padding.
        packed = pack_padded_sequence(embs, lengths, batch_first=True, enforce_sorted=False)
        outputs, state = self.rnn(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=X.shape[1])
        return outputs, state


@dataclass
class Seq2SeqState:
    """Decoding state: encoder outputs (B, S, h), decoder hidden state (layers, B, h), valid lens (B,)."""

    enc_outputs: Tensor
    hidden: Tensor
    src_valid_lens: Tensor | None


class Seq2SeqAttentionDecoder(nn.Module):
    """The book's GRU decoder with additive (Bahdanau) attention over all encoder states.

    Shape: X (B, T) token ids + state -> logits (B, T, V), new state.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int, dropout: float = 0.0):
        super().__init__()
        self.attention = AdditiveAttention(num_hiddens, dropout, query_size=num_hiddens, key_size=num_hiddens)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(
            embed_size + num_hiddens, num_hiddens, num_layers, dropout=_between(dropout, num_layers), batch_first=True
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, enc_outputs: Tensor, enc_state: Tensor, src_valid_lens: Tensor | None) -> Seq2SeqState:
        return Seq2SeqState(enc_outputs, enc_state, src_valid_lens)

    def forward(self, X: Tensor, state: Seq2SeqState) -> tuple[Tensor, Seq2SeqState]:
        embs = self.embedding(X)  # (B, T, E)
        hidden, outputs = state.hidden, []
        for t in range(X.shape[1]):
            query = hidden[-1].unsqueeze(1)  # (B, 1, h): the top layer's previous state
            context = self.attention(query, state.enc_outputs, state.enc_outputs, state.src_valid_lens)  # (B, 1, h)
            out, hidden = self.rnn(torch.cat([context, embs[:, t : t + 1]], dim=-1), hidden)
            outputs.append(out)
        logits = self.dense(torch.cat(outputs, dim=1))  # (B, T, V)
        return logits, Seq2SeqState(state.enc_outputs, hidden, state.src_valid_lens)


class EncoderDecoder(nn.Module):
    """Encoder + decoder with the decoding protocol of ARCHITECTURE.md.

    Shape: src (B, S), tgt_in (B, T), src_valid_lens (B,) -> logits (B, T, V).
    """

    MODEL_TYPE = "bahdanau"
    ATTENTION_KINDS = ("cross",)  # the decoder's additive attention over the source; no self-attention
    max_target_positions = None  # an RNN has no position table: any output length fits

    def attention_kinds(self) -> dict[str, list[nn.Module]]:
        """kind -> attention modules, as `Transformer.attention_kinds`: only cross (Lt x Ls)."""
        return {"cross": [self.decoder.attention]}

    def __init__(self, encoder: Seq2SeqEncoder, decoder: Seq2SeqAttentionDecoder, config: BahdanauConfig | None = None):
        super().__init__()
        self.encoder, self.decoder, self.config = encoder, decoder, config

    @classmethod
    def from_config(cls, config: BahdanauConfig) -> EncoderDecoder:
        if not isinstance(config, BahdanauConfig):
            raise ValueError(f"EncoderDecoder.from_config expects a BahdanauConfig, got {type(config).__name__}")
        c = config
        encoder = Seq2SeqEncoder(c.src_vocab_size, c.embed_size, c.num_hiddens, c.num_layers, c.dropout)
        decoder = Seq2SeqAttentionDecoder(c.tgt_vocab_size, c.embed_size, c.num_hiddens, c.num_layers, c.dropout)
        return cls(encoder, decoder, config)

    def forward(self, src: Tensor, tgt_in: Tensor, src_valid_lens: Tensor | None = None) -> Tensor:
        logits, _ = self.decode_step(tgt_in, self.start_decoding(src, src_valid_lens))
        return logits

    def start_decoding(self, src: Tensor, src_valid_lens: Tensor | None = None) -> Seq2SeqState:
        if src.dim() != 2:
            raise ValueError(f"src must be token ids of shape (B, S), got {tuple(src.shape)}")
        if src_valid_lens is not None and tuple(src_valid_lens.shape) != (src.shape[0],):
            raise ValueError(f"src_valid_lens must have shape ({src.shape[0]},), got {tuple(src_valid_lens.shape)}")
        enc_outputs, enc_state = self.encoder(src, src_valid_lens)
        return self.decoder.init_state(enc_outputs, enc_state, src_valid_lens)

    def decode_step(self, tgt: Tensor, state: Seq2SeqState) -> tuple[Tensor, Seq2SeqState]:
        if tgt.dim() != 2 or tgt.shape[0] != state.hidden.shape[1]:
            raise ValueError(f"decode_step expects tgt of shape ({state.hidden.shape[1]}, t), got {tuple(tgt.shape)}")
        return self.decoder(tgt, state)

    def reorder_state(self, state: Seq2SeqState, index: Tensor, same_sources: bool = False) -> Seq2SeqState:
        """Keep (and repeat) the rows named by index (B',); with same_sources (beams reordered within
        their sentence) only the decoder's hidden state moves, the encoder outputs stay as they are."""
        if same_sources:
            return Seq2SeqState(state.enc_outputs, state.hidden.index_select(1, index), state.src_valid_lens)
        lens = None if state.src_valid_lens is None else state.src_valid_lens.index_select(0, index)
        return Seq2SeqState(state.enc_outputs.index_select(0, index), state.hidden.index_select(1, index), lens)


def build_bahdanau(config: BahdanauConfig) -> EncoderDecoder:
    return EncoderDecoder.from_config(config)
