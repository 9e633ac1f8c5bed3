"""PyTorch's "Language Translation with nn.Transformer" tutorial recipe (written by us), kept as the
time-to-quality baseline: what a user who follows the tutorial writes.

`nn.Transformer` with d_model 512, 8 heads, FFN 512, 3 + 3 layers, dropout 0.1; embeddings * sqrt(D) plus
sinusoids; batches of 128 sentences; Adam at a constant 1e-4 (betas 0.9/0.98, eps 1e-9); cross-entropy
that ignores padding; greedy decoding that recomputes the whole prefix at every step (the tutorial's).

Shape: src (B, S), tgt_in (B, T), src_valid_lens (B,) -> logits (B, T, V).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention.positions import sinusoidal_encoding

SETTINGS = {"model": "nn.Transformer d512 h8 ffn512 3+3 dropout 0.1", "train": "Adam 1e-4 const, 128 sents"}
BATCHING = {"batch_size": 128}  # sentences per batch, as the tutorial


class TutorialTransformer(nn.Module):
    """The tutorial's translator: embeddings * sqrt(D) + sinusoids, nn.Transformer, a linear output layer."""

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d: int = 512,
        heads: int = 8,
        layers: int = 3,
        ffn: int = 512,
        dropout: float = 0.1,
        max_len: int = 256,
    ):
        super().__init__()
        self.d = d
        self.src_emb, self.tgt_emb = nn.Embedding(src_vocab, d), nn.Embedding(tgt_vocab, d)
        self.register_buffer("P", sinusoidal_encoding(torch.arange(max_len), d), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.core = nn.Transformer(d, heads, layers, layers, ffn, dropout, batch_first=True)
        self.out = nn.Linear(d, tgt_vocab)

    def forward(self, src, tgt_in, src_valid_lens):
        S, T = src.shape[1], tgt_in.shape[1]
        pad = torch.arange(S)[None, :] >= src_valid_lens[:, None]  # True = ignore (torch's sense)
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        x = self.drop(self.src_emb(src) * math.sqrt(self.d) + self.P[:S])  # (B, S, D)
        y = self.drop(self.tgt_emb(tgt_in) * math.sqrt(self.d) + self.P[:T])  # (B, T, D)
        return self.out(self.core(x, y, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad))

    @torch.no_grad()
    def greedy(self, src, src_valid_lens, bos: int, eos: int, max_len: int) -> list[list[int]]:
        """The tutorial's greedy decoding: the whole prefix is recomputed at every step."""
        self.eval()
        B = src.shape[0]
        prefix = torch.full((B, 1), bos, dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        for _ in range(max_len):
            nxt = self(src, prefix, src_valid_lens)[:, -1].argmax(-1)  # (B,)
            prefix = torch.cat([prefix, nxt[:, None]], 1)
            done |= nxt == eos
            if bool(done.all()):
                break
        return [row[: row.index(eos)] if eos in row else row for row in prefix[:, 1:].tolist()]


def tutorial_recipe(data, seed: int = 0):
    """(step, decode) of the tutorial recipe on `data` (a TranslationData): step(batch) -> loss makes one
    Adam update; decode(src, lens, max_len) -> token id lists, greedily."""
    torch.manual_seed(seed)
    model = TutorialTransformer(len(data.src_vocab), len(data.tgt_vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    pad = data.tgt_vocab.pad

    def step(batch) -> float:
        model.train()
        logits = model(batch.src, batch.tgt_in, batch.src_valid_lens)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.tgt_out.reshape(-1), ignore_index=pad)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    def decode(src, lens, max_len):
        return model.greedy(src, lens, data.tgt_vocab.bos, data.tgt_vocab.eos, max_len)

    return step, decode
