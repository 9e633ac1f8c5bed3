"""`DecodeJob`: what decoding a batch of source ids needs from a translator, taken once per call — the model,
the special tokens, the device and the output-length rule — in fairseq's shape
(`SequenceGenerator(models, tgt_dict, max_len_a, max_len_b)`). The batcher (`attnlab.decoding.batches`) and its
worker processes take the job, never the whole Translator; the worker pool is keyed on it.

    job = translator.job()                  # a Translator's own
    job.search([[4, 5, 6]], translator.options(beam=2))   # one batch: [[Hypothesis, ...]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.decoding.generator import generate
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.static import decoding_model

__all__ = ["DecodeJob"]


@dataclass(frozen=True)
class DecodeJob:
    """How to decode source id lists of one translator.

    Args:
        model: the decoding model (`attnlab.decoding.protocol`).
        bos: the decoder's first input; eos: the target <eos>.
        src_eos, src_pad: the source vocabulary's <eos> (ends every source row) and padding.
        device: where the batches are made.
        max_len_a, max_len_b: a source of S tokens (<eos> included) decodes at most max_len_a * S + max_len_b
            tokens (fairseq's rule), within `max_output_len` and the decoder's positions.
        static_step: the GPU's static-shape step ('static', 'graphs', 'compile': `attnlab.decoding.static`),
            or None (dynamic).
        tgt_vocab: the target vocabulary (its `decode`), where batches may be asked for their texts
            (`search_batches(texts=True)`: each worker detokenizes what it decoded, in parallel), or None.

    Examples:
        >>> job = DecodeJob(nn.Identity(), bos=1, eos=2, src_eos=2, src_pad=0, device=torch.device("cpu"),
        ...                 max_len_a=2, max_len_b=10, max_output_len=200)
        >>> job.output_limit(3), job.output_limit(3, max_len=5)
        (16, 5)
        >>> src, lens = job.source_batch([[4, 5], [6]])   # (B, S): <eos> added, padded
        >>> src.tolist(), lens.tolist()
        ([[4, 5, 2], [6, 2, 0]], [3, 2])
    """

    model: nn.Module
    bos: int
    eos: int
    src_eos: int
    src_pad: int
    device: torch.device
    max_len_a: int
    max_len_b: int
    max_output_len: int
    static_step: str | None = None
    tgt_vocab: Any = None

    def output_limit(self, src_len: int, max_len: int | None = None) -> int:
        """Most tokens decoded for a source of `src_len` tokens (<eos> included): within the hard cap,
        max_len_a * src_len + max_len_b (or `max_len` where given: `DecodeOptions.max_len`), and the decoder's
        position capacity (a learned position table of P rows holds the inputs <bos> + P - 1 tokens, so at most P
        steps)."""
        rule = min(self.max_output_len, self.max_len_a * src_len + self.max_len_b)
        limit = rule if max_len is None else max_len
        capacity = getattr(self.model, "max_target_positions", None)
        return max(1, min(limit, capacity)) if capacity else limit

    def source_batch(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Source id lists (no <eos>) -> src (B, S) with <eos> added and padded, lens (B,)."""
        rows = [list(s) + [self.src_eos] for s in seqs]  # the source ends with <eos>, as in training
        S = max(len(r) for r in rows)
        src = torch.tensor([r + [self.src_pad] * (S - len(r)) for r in rows], dtype=torch.long, device=self.device)
        return src, torch.tensor([len(r) for r in rows], device=self.device)

    def search(
        self,
        seqs: Sequence[Sequence[int]],
        options: DecodeOptions,
        prefixes: Sequence[Sequence[int]] | None = None,
        constraints: Sequence[Sequence[Sequence[int]]] | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> list[list[Hypothesis]]:
        """One batch: source id lists (no <eos>), their target prefixes (all of one length; None: none) and
        constraint phrases as target ids -> options.n_best hypotheses each (`attnlab.decoding.generate`)."""
        src, lens = self.source_batch(seqs)
        P = len(prefixes[0]) if prefixes else 0
        steps = max(1, self.output_limit(src.shape[1], options.max_len) - P)
        prefix = torch.tensor(prefixes, dtype=torch.long, device=src.device) if P else None
        # A GPU's static-shape step where the job asks for one; a prefix, fed in one multi-token step, decodes
        # dynamically.
        model = self.model if P else decoding_model(self.model, self.static_step)
        cons = constraints if constraints is not None and any(constraints) else None
        return generate(
            model, src, lens, options, bos=self.bos, eos=self.eos, max_len=steps, prefix=prefix, constraints=cons,
            generator=generator,
        )  # fmt: skip
