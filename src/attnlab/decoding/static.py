"""A Transformer decoding step on static shapes, for a GPU: one step replayed as a CUDA graph (or compiled).

The dynamic cache (`attnlab.attention.KVCache`) grows by a step and shrinks with the batch, and the modules
check their inputs on the host; on a GPU the step is then launch- and Python-bound (a few hundred small
kernels, each waited for). `StaticDecoder` decodes the same model through the same decoding protocol
(`attnlab.decoding.protocol`, so every search of the generator runs through it) on buffers whose shapes
never change while a batch decodes:

    self-attention keys/values (R, H, Lmax, Dh): step t writes row t (an index on the device, not a Python int)
      and attends over all Lmax rows with the rows after t masked, so every step has the same shapes
    cross-attention keys/values (R, H, S, Dh) and the source key mask: projected once per batch
    R rows: the batch's rows; `live` names the buffer row of each live row, so sentences that finish only
      leave `live` (no copy) until half the rows are done, then leave in bulk (new buffers of the live rows;
      R only shrinks by halves, so a batch sees few shapes); beam search's reorders copy only where a row
      is taken twice

Modes: 'static' runs the step eagerly (the CPU's check that it decodes as the dynamic cache does); 'graphs'
captures it once per R as a `torch.cuda.CUDAGraph` and replays it (one launch a step); 'compile' runs it
through `torch.compile(mode="reduce-overhead")`. Covered: the encoder–decoder Transformer with sinusoidal
or learned positions added to the embeddings, full multi-head attention, no window; other models decode
dynamically (`covers`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.heads import head_masks_active
from attnlab.attention.recording import recording_active

MODES = ("static", "graphs", "compile")

__all__ = ["MODES", "StaticDecoder", "StaticState", "decoding_model"]


def decoding_model(model: nn.Module, mode: str | None) -> nn.Module:
    """What the generator should decode with: `StaticDecoder(model, mode)` where `mode` is set and the
    static step covers the model (and nothing records attention or masks heads), else the model itself."""
    if mode is None:
        return model
    if mode not in MODES:
        raise ValueError(f"static decoding mode must be one of {MODES}, got {mode!r}")
    if not StaticDecoder.covers(model) or recording_active() or head_masks_active():
        return model
    return StaticDecoder(model, mode)


@dataclass
class StaticState:
    """One batch's static buffers. Shape: R rows, Lmax steps, H heads, S source positions.

    live (n,) the buffer row of each live row; tokens (R, 1) the step's input; t (1,) the step's position;
    self_k/self_v per block (R, H, Lmax, Dh); cross_k/cross_v per block (R, H, S, Dh); src_visible
    (R, 1, 1, S) bool; logits (R, V) the step's output.
    """

    live: Tensor
    memory: Tensor  # (R, S, D) encoder output, one row per batch row
    src_visible: Tensor
    t: Tensor
    steps: int = 0  # Lmax, set by `reserve`
    tokens: Tensor | None = None
    self_k: list[Tensor] = field(default_factory=list)
    self_v: list[Tensor] = field(default_factory=list)
    cross_k: list[Tensor] = field(default_factory=list)
    cross_v: list[Tensor] = field(default_factory=list)
    logits: Tensor | None = None
    graph: object = None  # the captured step of these buffers (mode 'graphs')

    @property
    def rows(self) -> int:
        return self.memory.shape[0]

    def reserve(self, steps: int) -> None:
        self.steps = max(self.steps, steps)


class StaticDecoder(nn.Module):
    """`model`'s decoding protocol on static shapes (see the module docstring); `model` holds the weights.

    Examples:
        >>> import torch
        >>> from attnlab.models import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, num_hiddens=16,
        ...                                       num_heads=4, num_layers=2, ffn_num_hiddens=32)).eval()
        >>> static = StaticDecoder(model, "static")
        >>> state = static.start_decoding(torch.randint(3, 10, (2, 5)), torch.tensor([5, 3]))
        >>> state.reserve(4)
        >>> logits, state = static.decode_step(torch.ones(2, 1, dtype=torch.long), state)
        >>> logits.shape   # (rows, 1, V)
        torch.Size([2, 1, 12])
    """

    def __init__(self, model: nn.Module, mode: str = "static"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.model: Any = model  # a Transformer (`covers`)
        self.mode = mode
        self._compiled: Any = None  # the compiled step (mode "compile"), made at its first use

    @staticmethod
    def covers(model: nn.Module) -> bool:
        """Whether the static step computes what `model.decode_step` does (else decode dynamically)."""
        cfg = getattr(model, "config", None)
        dec = getattr(model, "decoder", None)
        if cfg is None or dec is None or getattr(model, "MODEL_TYPE", None) != "transformer":
            return False
        blocks = list(getattr(dec, "blocks", []))
        attn = [m for b in blocks for m in (b.self_attention, b.cross_attention)]
        return (
            bool(blocks)
            and dec.pos_encoding is not None
            and dec.rotary is None
            and dec.relative_bias is None
            and all(
                a.window is None and a.num_heads * a.head_dim == a.num_hiddens and a.groups == 1 and a.rotary is None
                for a in attn
            )
        )

    # -- the decoding protocol ----------------------------------------------------------------------------
    def start_decoding(self, src: Tensor, src_valid_lens: Tensor | None = None) -> StaticState:
        memory = self.model.encoder(src, src_valid_lens)
        S = memory.shape[1]
        lens = torch.full((src.shape[0],), S, device=src.device) if src_valid_lens is None else src_valid_lens
        visible = (torch.arange(S, device=src.device)[None, :] < lens.to(src.device)[:, None])[:, None, None, :]
        rows = torch.arange(src.shape[0], device=src.device)
        return StaticState(rows, memory, visible, torch.zeros(1, dtype=torch.long, device=src.device))

    def decode_step(self, tgt: Tensor, state: StaticState) -> tuple[Tensor, StaticState]:
        n = state.live.numel()
        if tgt.dim() != 2 or tgt.shape != (n, 1):
            raise ValueError(f"the static step takes one token per live row, ({n}, 1); got {tuple(tgt.shape)}")
        if state.tokens is None:
            self._allocate(state)
        assert state.tokens is not None and state.logits is not None
        state.tokens.index_copy_(0, state.live, tgt)
        if self.mode == "graphs":
            if state.graph is None:
                state.graph = self._capture(state)
            state.graph.replay()  # type: ignore[attr-defined]
        elif self.mode == "compile":
            if self._compiled is None:
                self._compiled = torch.compile(self._step, mode="reduce-overhead", dynamic=False)
            self._compiled(state)
        else:
            self._step(state)
        state.t.add_(1)
        logits = state.logits.index_select(0, state.live)[:, None, :]  # a copy: the next replay overwrites
        suppress = self.model.config.suppress_tokens
        if suppress:
            logits[..., suppress] = float("-inf")
        return logits, state

    def reorder_state(self, state: StaticState, index: Tensor, same_sources: bool = False) -> StaticState:
        """Keep the live rows named by index (n'): in new buffers of n' rows when they would grow (beam search's
        expansion) or when n' is at most half of the buffers' rows (finished rows leave in bulk); else in the
        same buffers, by renaming `live` where no row is taken twice, else by copying rows."""
        n = index.numel()
        if state.tokens is None or n > state.rows or n <= state.rows // 2:
            return self._rebuilt(state, index)
        sources = state.live.index_select(0, index)
        if torch.unique(sources).numel() == n:  # each row kept once: the rows stay where they are
            state.live = sources
            return state
        targets = state.live[:n] if n <= state.live.numel() else torch.arange(n, device=index.device)
        for buf in (*state.self_k, *state.self_v, *state.cross_k, *state.cross_v, state.memory, state.src_visible):
            buf.index_copy_(0, targets, buf.index_select(0, sources))
        state.live = targets
        return state

    # -- buffers and the step -------------------------------------------------------------------------------
    def _rebuilt(self, state: StaticState, index: Tensor) -> StaticState:
        """A state of exactly index.numel() rows, taken from `state`'s (its buffers left to the collector)."""
        index = state.live.index_select(0, index)  # buffer rows
        rows = torch.arange(index.numel(), device=index.device)
        new = StaticState(rows, state.memory.index_select(0, index), state.src_visible.index_select(0, index), state.t)
        new.steps = state.steps
        if state.tokens is not None:
            take = lambda bufs: [b.index_select(0, index) for b in bufs]  # noqa: E731
            new.self_k, new.self_v = take(state.self_k), take(state.self_v)
            new.cross_k, new.cross_v = take(state.cross_k), take(state.cross_v)
            new.tokens = state.tokens.new_zeros((index.numel(), 1))
            new.logits = state.logits.new_empty((index.numel(), state.logits.shape[1]))  # type: ignore[union-attr]
        return new

    def _allocate(self, state: StaticState) -> None:
        """The buffers, at the first step: cross-attention keys/values projected once, empty self-attention ones."""
        dec, R, mem = self.model.decoder, state.rows, state.memory
        table = dec.pos_encoding.embedding.weight if dec.pos_encoding.learned else dec.pos_encoding.P[0]
        if not 1 <= state.steps <= table.shape[0]:
            raise ValueError(
                f"the static step needs 1 to {table.shape[0]} steps reserved (state.reserve), got {state.steps}"
            )
        for block in dec.blocks:
            a = block.self_attention
            shape = (R, a.num_heads, state.steps, a.head_dim)
            state.self_k.append(mem.new_zeros(shape))
            state.self_v.append(mem.new_zeros(shape))
            c = block.cross_attention
            state.cross_k.append(_heads(c.W_k(mem), c.num_heads))
            state.cross_v.append(_heads(c.W_v(mem), c.num_heads))
        state.tokens = torch.zeros((R, 1), dtype=torch.long, device=mem.device)
        state.logits = mem.new_empty((R, dec.dense.out_features))

    def _step(self, state: StaticState) -> None:
        """One step on the static buffers: reads tokens and t, writes the step's keys/values and logits."""
        dec = self.model.decoder
        assert state.tokens is not None and state.logits is not None
        X = dec.embedding(state.tokens) * dec.embed_scale  # (R, 1, D)
        X = X + _position(dec.pos_encoding, state.t).to(X.dtype)
        seen = (torch.arange(state.steps, device=X.device) <= state.t)[None, None, None, :]  # (1, 1, 1, Lmax)
        for i, block in enumerate(dec.blocks):
            X = block.addnorm1(X, lambda x, a=block.self_attention, i=i: _self_attend(a, x, state, i, seen))
            X = block.addnorm2(X, lambda x, a=block.cross_attention, i=i: _cross_attend(a, x, state, i))
            X = block.addnorm3(X, block.ffn)
        state.logits.copy_(dec.dense(dec.final_norm(X))[:, 0])

    def _capture(self, state: StaticState):
        """The step on these buffers as a CUDA graph (warmed up on a side stream first, as torch asks)."""
        t = state.t.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step(state)  # the warm-up writes row t, which the captured step rewrites identically
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step(state)
        state.t.copy_(t)
        return graph


def _heads(x: Tensor, heads: int) -> Tensor:
    """(R, L, D) -> (R, H, L, Dh)."""
    R, L, D = x.shape
    return x.view(R, L, heads, D // heads).transpose(1, 2)


def _position(pos_encoding, t: Tensor) -> Tensor:
    """The (1, 1, D) encoding of position t (a (1,) device tensor), read from the table without a host sync."""
    table = pos_encoding.embedding.weight if pos_encoding.learned else pos_encoding.P[0]
    return table.index_select(0, t)[None]


def _self_attend(attn, x: Tensor, state: StaticState, i: int, seen: Tensor) -> Tensor:
    q, k, v = (_heads(w(x), attn.num_heads) for w in (attn.W_q, attn.W_k, attn.W_v))  # (R, H, 1, Dh)
    state.self_k[i].index_copy_(2, state.t, k)
    state.self_v[i].index_copy_(2, state.t, v)
    out = F.scaled_dot_product_attention(q, state.self_k[i], state.self_v[i], attn_mask=seen)
    return attn.W_o(out.transpose(1, 2).reshape(x.shape))


def _cross_attend(attn, x: Tensor, state: StaticState, i: int) -> Tensor:
    q = _heads(attn.W_q(x), attn.num_heads)
    out = F.scaled_dot_product_attention(q, state.cross_k[i], state.cross_v[i], attn_mask=state.src_visible)
    return attn.W_o(out.transpose(1, 2).reshape(x.shape))
