"""What decoding asks of a model, and how it calls it.

A model decodes when it has `start_decoding(src, src_valid_lens) -> state`, `decode_step(tokens, state)
-> (logits, state)` (`Decoder`) and optionally `reorder_state(state, rows, same_sources=False)` (rows of
the batch leave or are copied: `Reorders`), `expand_beams(state, rows, K)` (beam search's one-time
expansion: `ExpandsBeams`) and a state with `reserve(steps)` (caches sized once: `Reserves`). The loop
asks these protocols, never the model's attributes. Greedy and beam search run inside `inference(model)`:
eval mode and no gradients for the duration, the model's mode restored afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn


@runtime_checkable
class Decoder(Protocol):
    """A model that decodes: the encoder once, then one step per token."""

    def start_decoding(self, src: Tensor, src_valid_lens: Tensor | None = None) -> Any: ...

    def decode_step(self, tokens: Tensor, state: Any) -> tuple[Tensor, Any]: ...


@runtime_checkable
class Reorders(Protocol):
    """A model whose state's rows may leave or be copied (done sentences leave the batch, beams change
    parents); without it every row stays in the batch to the end."""

    def reorder_state(self, state: Any, rows: Tensor, same_sources: bool = False) -> Any: ...


@runtime_checkable
class ExpandsBeams(Protocol):
    """A model that expands each sentence to K hypotheses keeping its memory one row per sentence."""

    def expand_beams(self, state: Any, src_rows: Tensor, K: int) -> Any: ...


@runtime_checkable
class Reserves(Protocol):
    """A state that sizes its caches once for the steps to come."""

    def reserve(self, steps: int) -> None: ...


def reorders(model: object) -> bool:
    """Whether done sentences may leave `model`'s batch (`Reorders`)."""
    return isinstance(model, Reorders)


@contextmanager
def inference(model: nn.Module):
    # A model already in eval mode everywhere (a Translator's) is left alone: eval() and train() walk every
    # module, ~0.5 ms each for the laptop Transformer, which a one-sentence request paid twice.
    switch = any(m.training for m in model.modules())
    was_training = model.training
    if switch:
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if switch:
            model.train(was_training)


def check_source(src: Tensor, src_valid_lens: Tensor | None, max_len: int | None) -> None:
    if src.dim() != 2:
        raise ValueError(f"src must be token ids of shape (B, S), got {tuple(src.shape)}")
    if src_valid_lens is not None and tuple(src_valid_lens.shape) != (src.shape[0],):
        raise ValueError(f"src_valid_lens must have shape ({src.shape[0]},), got {tuple(src_valid_lens.shape)}")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


def reserve_steps(state, steps: int) -> None:
    """Tell a state that can size its caches up front (`TransformerState.reserve`) how many steps are coming."""
    if isinstance(state, Reserves):
        state.reserve(steps)


def expand_state(model: nn.Module, state, src_rows: Tensor, K: int):
    """Sentence i's K hypotheses start from its row (src_rows (n*K,)): `expand_beams` where the model has
    it (memory and cross-attention keys/values stay one row per sentence), else `reorder_state`."""
    if isinstance(model, ExpandsBeams):
        return model.expand_beams(state, src_rows[::K], K)
    return model.reorder_state(state, src_rows)
