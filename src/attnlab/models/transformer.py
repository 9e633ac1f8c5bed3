"""The encoder–decoder Transformer of "Attention Is All You Need", assembled from `attnlab.attention`.

    src (B, S) -> embed * sqrt(D) + positions -> N x [self-attention, FFN] -> memory (B, S, D)
    tgt (B, T) -> embed * sqrt(D) + positions -> N' x [causal self-attention, cross-attention, FFN]
               -> dense -> logits (B, T, V)

N = `num_layers`; N' = `decoder_layers`, N unless set. A deep encoder under a shallow decoder (Kasai et
al., "Deep Encoder, Shallow Decoder", 2021) keeps most of the quality and decodes faster: the encoder runs
once per sentence, the decoder once per token.

The layers live in `attnlab.models.transformer_layers`.
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

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.attention import ATTENTION_KINDS, KVCache, get_scheme
from attnlab.attention.heads import merge_pruned, prune_heads
from attnlab.inference.int8_step import Int8DecoderStep

from .config import TransformerConfig
from .fused import int8_step, unwatched
from .transformer_layers import (
    PositionWiseFFN,
    TransformerDecoder,
    TransformerEncoder,
    make_activation,
    token_embedding,
)


@dataclass
class TransformerState:
    """Decoding state of one batch: encoder memory and a (self, cross) KVCache pair per decoder block.

    Shape: memory (B, S, D); src_valid_lens (B,) or None; self-attention caches (B*beam, H, L, Dh),
    cross-attention caches (B, H, S, Dh). `beam` target rows share each memory row (beam search's
    hypotheses of one sentence, see `Transformer.expand_beams`); 1 outside beam search.

    ancestry (B*beam, A) or None: reorders the fused step reads through instead of copying the caches (see
    `Transformer.reorder_state`): row i's steps t < A lie in self-attention cache row ancestry[i, t], its
    later ones in row i; the caches may then hold more rows than the state. `settle` lays them out again.
    """

    memory: Tensor
    src_valid_lens: Tensor | None
    caches: list[tuple[KVCache, KVCache]]
    beam: int = 1
    step: Int8DecoderStep | None = None  # int8's fused step, where it covers the model
    ancestry: Tensor | None = None

    @property
    def offset(self) -> int:
        """Number of target steps decoded so far (the length of the self-attention caches)."""
        return len(self.caches[0][0]) if self.caches else 0

    @property
    def rows(self) -> int:
        """Target rows decoded side by side: B * beam."""
        return self.memory.shape[0] * self.beam

    def reserve(self, steps: int) -> None:
        """Decoding will run at most `steps` steps: size the self-attention caches for them once
        (`KVCache.reserve`)."""
        for self_cache, _ in self.caches:
            self_cache.reserve(steps)

    def select_sources(self, index: Tensor, beam: int) -> TransformerState:
        """The memory, source lengths and cross-attention caches of the sources named by index (B',),
        with `beam` target rows each (the self-attention caches are left to the caller)."""
        for _, cross_cache in self.caches:
            cross_cache.reorder(index)
        lens = None if self.src_valid_lens is None else self.src_valid_lens.index_select(0, index)
        memory = self.memory.index_select(0, index)
        return TransformerState(memory, lens, self.caches, beam, self.step, self.ancestry)

    def settle(self) -> None:
        """Lay the self-attention caches out as the rows they hold (one row per target row, steps in
        place), where reorders were kept as `ancestry`: what the modules read."""
        if self.ancestry is None:
            return
        steps = self.lineage(self.offset)
        for self_cache, _ in self.caches:
            self_cache.reorder(steps)
        self.ancestry = None

    def lineage(self, L: int) -> Tensor:
        """(rows, L): the cache row of each row's step t < L (`ancestry`, then the row itself)."""
        anc, rows = self.ancestry, self.rows
        own = torch.arange(rows)[:, None].expand(rows, L - (0 if anc is None else anc.shape[1]))
        return own.contiguous() if anc is None else torch.cat([anc, own], dim=1)

    def reorder_lazily(self, index: Tensor) -> bool:
        """Keep the rows named by index (R',) as `ancestry` instead of copying the self-attention caches,
        where the fused step reads them (its caches filled, rows that do not outgrow them, index int64 on
        the CPU) and the rows are a beam's (greedy's rows only leave: copying the rest costs less than
        reading every later step through the index); says whether it did."""
        caches = [sc for sc, _ in self.caches]
        if (
            self.step is None
            or (self.beam == 1 and self.ancestry is None)
            or not caches
            or index.dtype is not torch.int64
            or not index.is_cpu
            or index.dim() != 1
            or any(sc.k is None or sc.k.shape[0] < index.numel() for sc in caches)
        ):
            return False
        self.ancestry = self.lineage(self.offset).index_select(0, index)
        return True


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
        >>> sorted(model.attention_kinds())                   # the maps `attnlab.analysis.explain` draws
        ['cross', 'decoder_self', 'encoder_self']
    """

    MODEL_TYPE = "transformer"
    # The attention maps this model produces, by kind -> the recorded modules of that kind in layer
    # order (see `attention_kinds`); `attnlab.analysis.explain` groups recordings by this, not by name matching.
    ATTENTION_KINDS = ATTENTION_KINDS

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise ValueError(
                f"Transformer expects a TransformerConfig, got {type(config).__name__}; "
                f"use TransformerConfig.from_dict(d) for a dict"
            )
        self.config = c = config
        shared = token_embedding(c.src_vocab_size, c.num_hiddens) if c.share_embeddings else None
        common: dict[str, Any] = dict(
            bias=c.bias,
            norm_first=c.norm_first,
            max_len=c.max_len,
            positions=c.positions,
            position_options=c.position_options,
            num_kv_heads=c.num_kv_heads,
            embedding=shared,
            embed_scale=c.embedding_scale,
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
            c.tgt_vocab_size, c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.decoder_depth, c.dropout, **common
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
        """Decoder positions the model has: a learned table's rows, or None (other schemes never run out)."""
        return self.config.max_len if get_scheme(self.config.positions).bounded else None

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
        in row-major order (the Trainer passes the real target positions: `attnlab.training.target_mask`)."""
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
        return TransformerState(memory, src_valid_lens, caches, step=int8_step(self.decoder))

    def decode_step(self, tgt: Tensor, state: TransformerState) -> tuple[Tensor, TransformerState]:
        """Run the new target tokens tgt (B*beam, t) against the cache; returns logits (B*beam, t, V) and
        the state, updated in place (positions continue at `state.offset`)."""
        if tgt.dim() != 2 or tgt.shape[0] != state.rows:
            raise ValueError(f"decode_step expects tgt of shape ({state.rows}, t), got {tuple(tgt.shape)}")
        logits = None
        if state.step is not None and tgt.shape[1] == 1 and unwatched(state.step.modules) and state.step.covers(state):
            logits = state.step(tgt, state)
        if logits is None:
            state.settle()
            logits = self.decoder(
                tgt, state.memory, state.src_valid_lens, state.caches, offset=state.offset, beam=state.beam
            )
        if self.config.suppress_tokens:  # e.g. Marian's <pad>, which generate() forbids (bad_words_ids)
            logits[..., self.config.suppress_tokens] = float("-inf")
        return logits, state

    def expand_beams(self, state: TransformerState, index: Tensor, beam: int) -> TransformerState:
        """Beam search's first expansion: the sources named by index (B',) get `beam` target rows each
        (source i's rows are i*beam .. i*beam + beam-1), copied from its single row.

        Only the self-attention caches are repeated: the encoder memory, the source lengths and the
        static cross-attention keys/values stay one row per source, and every later step folds the
        beam into the cross-attention's queries ("beamable" attention, fairseq's BeamableMM) instead of
        attending over `beam` copies of them.
        """
        if state.beam != 1:
            raise ValueError(f"expand_beams expects a state with one row per source, got beam={state.beam}")
        state.settle()
        rows = index.repeat_interleave(beam)
        for self_cache, _ in state.caches:
            self_cache.reorder(rows)
        every = torch.arange(state.memory.shape[0], device=index.device)
        if index.numel() == len(every) and bool((index == every).all()):  # all sources, in order: no copy
            return TransformerState(state.memory, state.src_valid_lens, state.caches, beam, state.step)
        return state.select_sources(index, beam)

    def reorder_state(self, state: TransformerState, index: Tensor, same_sources: bool = False) -> TransformerState:
        """Keep (and repeat) the target rows named by index (R',) — beam search's reshuffle.

        same_sources: every new row i comes from a row of the same source sentence as row i had
        (beams reordered within their sentence), so the encoder memory, the source lengths and the
        static cross-attention keys/values are already right and only the growing self-attention
        caches are reordered (fairseq's "beamable" state). Otherwise, with state.beam > 1, rows that
        keep whole groups of `beam` rows per source (sentences leaving the batch) keep the memory at one
        row per source; any other index gives every row its own copy of its source (beam becomes 1).
        """
        if not state.reorder_lazily(index):
            state.settle()
            for self_cache, _ in state.caches:
                self_cache.reorder(index)
        if same_sources:
            return state
        K = state.beam
        sources = index // K  # (R',) memory row of each new row
        if K > 1 and index.numel() % K == 0:
            groups = sources.view(-1, K)
            if bool((groups == groups[:, :1]).all()):
                return state.select_sources(groups[:, 0], K)
        return state.select_sources(sources, 1)


def _check_tokens(src: Tensor, tgt: Tensor | None, valid_lens: Tensor | None) -> None:
    if src.dim() != 2 or src.dtype.is_floating_point:
        raise ValueError(f"src must be integer token ids of shape (B, S), got {tuple(src.shape)} {src.dtype}")
    if tgt is not None and (tgt.dim() != 2 or tgt.shape[0] != src.shape[0]):
        raise ValueError(f"tgt_in must have shape ({src.shape[0]}, T), got {tuple(tgt.shape)}")
    if valid_lens is not None and tuple(valid_lens.shape) != (src.shape[0],):
        raise ValueError(f"src_valid_lens must have shape ({src.shape[0]},), got {tuple(valid_lens.shape)}")


__all__ = ["Transformer", "TransformerState"]
