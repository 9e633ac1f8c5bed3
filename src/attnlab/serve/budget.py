"""One estimate for every route, made before any queueing: what a request will cost to decode
(`attnlab.decoding.cost`) against the server's budgets, and the bytes its answer can take.

    refusal = request_refusal(translator, limits, sources, options, maps=True)   # None, or a 413 line

Work and peak memory come from the request's rows x steps x (layers, beam, n_best, alignment,
constraints); a request over `Limits.max_request_work` or `Limits.max_request_mb` is refused with a
message naming the option to lower first. The work budget defaults to `default_budget` with the
server's `max_texts`: a few times the larger of its largest plain request and one sentence explained with
every option at its largest. The batching path's queue holds at most QUEUED_BUDGETS budgets of work
(`queue_work`), each request counted at its own estimate (`request_work`). The explorer's answer also
holds every attention map: `explain_bytes_bound` bounds its JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnlab.decoding.cost import ModelShape, default_budget, over_budget, recorded_weights, translation_cost
from attnlab.decoding.options import DecodeOptions

from .guard import Limits
from .options import options_bytes


def work_budget(translator, limits: Limits) -> float:
    """Multiply-add equivalents one request may cost: `limits.max_request_work` (in G), or by default
    `attnlab.decoding.cost.default_budget` for the server's max_texts."""
    if limits.max_request_work is not None:
        return limits.max_request_work * 1e9
    return default_budget(translator, limits.max_texts)


QUEUED_BUDGETS = 4  # the batching queue holds this many requests at the budget (work waiting or decoding)


def queue_work(translator, limits: Limits) -> float:
    """Most estimated work the batching path holds waiting or decoding: QUEUED_BUDGETS x `work_budget`."""
    return QUEUED_BUDGETS * work_budget(translator, limits)


def request_work(translator, sources: Sequence[int], options: DecodeOptions | None) -> float:
    """The estimated work of decoding `sources` (token counts, <eos> included) with `options`."""
    return translation_cost(translator, sources, options).work


def request_refusal(
    translator, limits: Limits, sources: Sequence[int], options: DecodeOptions | None, *, maps: bool = False
) -> str | None:
    """None if decoding `sources` (token counts, <eos> included) with `options` fits the server's
    budgets, else the one line of its 413. maps: the explorer's recorded forward is counted too."""
    return over_budget(
        translator,
        sources,
        options,
        max_work=work_budget(translator, limits),
        max_bytes=limits.max_request_mb * 2**20,
        work_flag="--max-request-work",
        bytes_flag="--max-request-mb",
        maps=maps,
    )


def explain_bytes_bound(translator, src_len: int, beam: int = 1, options=None) -> int:
    """Most bytes the JSON of one explanation can take for a source of `src_len` tokens (<eos> included).

    Every weight is printed with 4 decimals ("0.1234," = 7 bytes; 8 counted for brackets); the output
    may run to the decoder's limit (options.max_len where given), + its <eos> row. The maps are the
    recorded forward's (`attnlab.decoding.cost.recorded_weights`: H heads x (N x Ls² + N' x (Lt² + Lt·Ls)),
    N encoder and N' decoder layers, for a Transformer or a decoder-only model's three views, Lt·Ls for
    Bahdanau). With beam > 1 the trace adds 2 x beam candidates of ~300 bytes per step; the n-best list and
    alignment add `options_bytes`.
    """
    max_len = None if options is None else options.max_len
    Ls, Lt = src_len, translator.output_limit(src_len, max_len) + 1
    numbers = recorded_weights(ModelShape.from_config(translator.config), Ls, Lt)
    trace = Lt * 2 * beam * 300 if beam > 1 else 0
    return 8 * numbers + 64 * (Ls + 2 * Lt) + 1024 + trace + options_bytes(Lt, Ls, options)


__all__ = ["QUEUED_BUDGETS", "explain_bytes_bound", "queue_work", "request_refusal", "request_work", "work_budget"]
