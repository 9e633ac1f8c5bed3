"""Batches for sequence-to-sequence training: length-bucketed, token-budgeted, seeded, shardable.

`plan_batches` decides which examples go together (pure, deterministic from (seed, epoch)) and
`iterate_batches` collates them into `Batch`es, so the DDP trainer and the tests can check the plan
without building tensors.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

_SRC, _TGT = operator.attrgetter("src_ids"), operator.attrgetter("tgt_ids")


@dataclass
class Batch:
    """A padded batch. The source ends with <eos> (as in the book); the target is split for
    teacher forcing: `tgt_in` = <bos> + y is fed to the decoder, `tgt_out` = y + <eos> is predicted.

    Shape:
        src: (B, S) long; src_valid_lens: (B,) long (tokens incl. <eos>, excl. padding)
        tgt_in, tgt_out: (B, T) long; tgt_valid_lens: (B,) long (real target tokens incl. <eos>)
        indices: (B,) long, the examples' positions in the list that was batched
    """

    src: torch.Tensor
    src_valid_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_valid_lens: torch.Tensor
    indices: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        """Real target tokens (incl. <eos>): the denominator of a per-token loss."""
        return int(self.tgt_valid_lens.sum())

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device, non_blocking: bool = False) -> Batch:
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        return self._map(lambda t: t.pin_memory())

    def _map(self, fn) -> Batch:
        """A copy with `fn` applied to every tensor field (None fields stay None)."""
        return replace(self, **{f.name: fn(v) for f in fields(self) if (v := getattr(self, f.name)) is not None})


class BatchPlan(Sequence[list[int]]):
    """One epoch's batches held as three integer arrays, not one Python list per batch.

    Batch j is `offset + order[bounds[b]:bounds[b + 1]]` with b = `batch_order[j]`: `order` lists the
    examples sorted by length, `bounds` cuts it into batches. Items are the index lists, made when asked
    for; a slice is a plan over the same arrays (a resumed epoch, a rank's share).
    """

    def __init__(self, order: np.ndarray, bounds: np.ndarray, batch_order: np.ndarray, offset: int = 0):
        self.order, self.bounds, self.batch_order, self.offset = order, bounds, batch_order, offset

    def __len__(self) -> int:
        return len(self.batch_order)

    def __getitem__(self, j):
        if isinstance(j, slice):
            return BatchPlan(self.order, self.bounds, self.batch_order[j], self.offset)
        b = int(self.batch_order[j])
        return (self.order[self.bounds[b] : self.bounds[b + 1]].astype(np.int64) + self.offset).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for j in range(len(self)):
            yield self[j]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside, like a list

    def nbytes(self) -> int:
        """Bytes of the arrays this plan holds."""
        return self.order.nbytes + self.bounds.nbytes + self.batch_order.nbytes


def _lengths(examples: Sequence, num_steps: int | None) -> np.ndarray:
    """Padded length each example needs: max(source + <eos>, target + 1), or num_steps when fixed."""
    n = len(examples)
    if num_steps is not None:
        return np.full(n, num_steps, np.int64)
    src = np.fromiter(map(len, map(_SRC, examples)), np.int64, n)
    tgt = np.fromiter(map(len, map(_TGT, examples)), np.int64, n)
    return np.maximum(src, tgt) + 1


def plan_batches(
    examples: Sequence,
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    num_steps: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> Sequence[list[int]]:
    """The index lists of this rank's batches for one epoch (a `BatchPlan`; for a prepared corpus an
    `EpochPlan` that plans one shard at a time).

    Examples are sorted by padded length (randomly within equal lengths when `shuffle`) and cut
    greedily, so a batch's padded size max(S, T) * B stays <= `batch_tokens` (an example longer than
    the budget goes alone) and B <= `batch_size`. With `shuffle`, the batch order is then permuted.
    Both shuffles come from (seed, epoch) only, so every rank computes the same list and takes
    batches rank, rank + world_size, ...; the remainder is dropped so all ranks run equally many steps.
    With `num_steps` (fixed shapes, the book's setting) all lengths are equal: batches are random.
    """
    if batch_tokens is None and batch_size is None:
        raise ValueError("plan_batches needs batch_tokens (a padded-token budget) or batch_size, got neither")
    for name, value in (("batch_tokens", batch_tokens), ("batch_size", batch_size), ("num_steps", num_steps)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")

    if hasattr(examples, "plan_batches"):
        # A memory-mapped corpus plans shard by shard from its lengths index (never one list of all).
        return examples.plan_batches(
            batch_tokens=batch_tokens,
            batch_size=batch_size,
            num_steps=num_steps,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
        )
    rng = np.random.default_rng([seed, epoch])
    batches = plan_lengths(
        _lengths(examples, num_steps), batch_tokens=batch_tokens, batch_size=batch_size, shuffle=shuffle, rng=rng
    )
    if world_size > 1:
        per_rank = len(batches) // world_size
        if per_rank == 0 and batches:
            raise ValueError(
                f"only {len(batches)} batch(es) for world_size={world_size}; use smaller batches or fewer processes"
            )
        batches = batches[rank : per_rank * world_size : world_size]
    return batches


def _batch_sizes(
    values: np.ndarray, counts: np.ndarray, batch_tokens: int | None, batch_size: int | None
) -> np.ndarray:
    """Sizes of the batches a greedy cut of the length-sorted examples gives, from the distinct padded
    lengths (ascending) and how many examples have each: one step per distinct length, not per example.

    Along the sorted order the newcomer is always the batch's longest member, so a batch may grow to
    `cap` = min(batch_tokens // length, batch_size) members (at least 1: an over-long example goes alone).
    """
    sizes: list = []
    open_size = 0  # members of the batch still open, carried into the next (longer) length
    for length, count in zip(values.tolist(), counts.tolist()):
        cap = count + open_size  # room for all that is left: what no limit binds
        if batch_size is not None:
            cap = min(cap, batch_size)
        if batch_tokens is not None and length > 0:
            cap = min(cap, batch_tokens // length)
        cap = max(cap, 1)
        take = min(max(cap - open_size, 0), count)
        open_size, count = open_size + take, count - take
        if count == 0:
            continue
        sizes.append([open_size])  # the open batch cannot take an example of this length
        full, open_size = divmod(count, cap)
        sizes.append(np.full(full, cap, np.int64))
    if open_size:
        sizes.append([open_size])
    return np.concatenate([np.asarray(x, np.int64) for x in sizes]) if sizes else np.zeros(0, np.int64)


def count_batches(lengths: np.ndarray, *, batch_tokens: int | None, batch_size: int | None) -> int:
    """How many batches `plan_lengths` cuts from `lengths`: the cut depends on the lengths only, not on
    the shuffle, so it is counted from the length histogram (no sort, no index array)."""
    values, counts = np.unique(lengths, return_counts=True)
    return len(_batch_sizes(values, counts, batch_tokens, batch_size))


def plan_lengths(
    lengths: np.ndarray,
    *,
    batch_tokens: int | None,
    batch_size: int | None,
    shuffle: bool,
    rng: np.random.Generator | None,
    offset: int = 0,
) -> BatchPlan:
    """Batches (index lists into `lengths`, the padded length each example needs, plus `offset`) cut
    greedily from the length-sorted order; with `shuffle`, ties are broken and batches ordered at
    random by `rng`. Held as a `BatchPlan`: a few bytes per example, whatever the number of examples."""
    lengths = np.asarray(lengths)
    if shuffle:
        if rng is None:
            raise ValueError("plan_lengths with shuffle=True needs an rng (a numpy Generator), got None")
        perm = rng.permutation(len(lengths))
        order = perm[np.argsort(lengths[perm], kind="stable")]
    else:
        order = np.argsort(lengths, kind="stable")
    values, counts = np.unique(lengths, return_counts=True)
    sizes = _batch_sizes(values, counts, batch_tokens, batch_size)
    bounds = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    batch_order = rng.permutation(len(sizes)) if rng is not None and shuffle else np.arange(len(sizes))
    index = np.int32 if len(lengths) < 2**31 else np.int64
    return BatchPlan(order.astype(index), bounds, batch_order.astype(np.int64), offset)


def _with_eos(seqs: list[list[int]], eos: int, pad: int, width: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """seqs -> ((B, W) long: each seq + <eos>, right-padded; (B,) valid lengths).

    W is the longest seq + 1, or `width` exactly: then each seq + <eos> is truncated or padded to it,
    as the book's `truncate_pad` (a truncated row loses its <eos>). A boolean-mask assignment fills
    row-major, i.e. in the seqs' concatenated order, so no per-row Python lists are built.
    """
    lens = np.fromiter(map(len, seqs), np.int64, len(seqs))
    full = int(lens.max(initial=0)) + 1
    out = np.full((len(seqs), max(full, width or 0)), pad, np.int64)
    out[np.arange(out.shape[1]) < lens[:, None]] = np.fromiter(
        itertools.chain.from_iterable(seqs), np.int64, int(lens.sum())
    )
    out[np.arange(len(seqs)), lens] = eos
    valid = lens + 1
    if width is not None:
        out, valid = out[:, :width], np.minimum(valid, width)
    return torch.from_numpy(np.ascontiguousarray(out)), torch.from_numpy(valid)


def collate(examples: Sequence, indices: Sequence[int], src_vocab, tgt_vocab, num_steps: int | None = None) -> Batch:
    """Pad one batch: src = x + <eos>, tgt_out = y + <eos>, tgt_in = <bos> + tgt_out[:-1] (the book's
    `dec_input`; so a row shorter than T shows its <eos> in tgt_in past its valid length, never inside).

    With `num_steps`, every row is exactly num_steps long, as the book's `build_array_nmt`.
    """
    batch = [examples[i] for i in indices]
    src, src_valid = _with_eos(list(map(_SRC, batch)), src_vocab.eos, src_vocab.pad, num_steps)
    tgt_out, tgt_valid = _with_eos(list(map(_TGT, batch)), tgt_vocab.eos, tgt_vocab.pad, num_steps)
    tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], tgt_vocab.bos), tgt_out[:, :-1]], dim=1)
    return Batch(src, src_valid, tgt_in, tgt_out, tgt_valid, torch.tensor(list(indices), dtype=torch.long))


def iterate_batches(
    examples: Sequence, src_vocab, tgt_vocab, *, num_steps: int | None = None, **plan: Any
) -> Iterator[Batch]:
    """Yield this rank's `Batch`es for one epoch: `plan_batches(examples, num_steps=..., **plan)`,
    each index list collated (see `plan_batches` for the arguments)."""
    for indices in plan_batches(examples, num_steps=num_steps, **plan):
        yield collate(examples, indices, src_vocab, tgt_vocab, num_steps)
