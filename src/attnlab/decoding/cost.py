"""What a decoding request will cost, estimated from its sizes before any work (no model runs).

    shape = ModelShape.from_config(translator.config)
    cost = decode_cost(shape, [9, 4], [28, 18], DecodeOptions(beam=4, n_best=2, align=True))
    cost.work, cost.peak_bytes          # multiply-add equivalents, bytes at the worst moment
    over_budget(translator, [9, 4], options, max_work=..., max_bytes=...)   # None, or one line: what to lower

Memory is a worst case: every row runs to its output limit. Work counts the steps the decode will take:
a row stops at its <eos>, so a sentence runs about EXPECTED_RATIO x its source's length, but never fewer
steps than min_len or its constraints' tokens force, and never more than its output limit (so a request
forcing a thousand-token output counts a thousand steps, and a plain one counts what it takes). Rows are
sentences x hypotheses (the beam; with sampling or greedy search, n_best). Work counts the
matrix multiply-adds of the encoder, of every decoder step (self-attention over the steps so far,
cross-attention over the source, the FFN, the output projection over the target vocabulary) and of the
alignment's recorded forward, plus the Python loops that grow with the options, converted to multiply-add
equivalents at fixed rates: each decoding step of a batch, each candidate constrained beam search weighs
(one per unmet phrase per hypothesis per step) and each history token `no_repeat_ngram` scans. Peak
memory is the larger of the decoding phase (caches of keys and values, the logits of every row, the
tokens kept) over the batches decoded at once, and the alignment phase (every hypothesis of every
sentence in one recorded forward: each layer's attention weights kept).

Figures are estimates of order, not predictions: a server compares them with its budget, and the
command line refuses what cannot fit in memory.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from attnlab.decoding.options import MAX_OUTPUT_TOKENS, DecodeOptions

__all__ = [
    "AUTO_FACTOR",
    "AUTO_SOURCE",
    "CANDIDATE_WORK",
    "EXPECTED_RATIO",
    "HISTORY_WORK",
    "STEP_WORK",
    "THREE_VIEWS",
    "Cost",
    "ModelShape",
    "decode_cost",
    "default_budget",
    "machine_verdict",
    "over_budget",
    "recorded_weights",
    "translation_cost",
]

THREE_VIEWS = ("transformer", "decoder-only")  # model kinds whose maps are encoder self, decoder self, cross
MAX_BEAM_SERVED = 8  # the largest beam and n_best a server takes: serve.guard.Limits.max_beam's default
FLOAT = 4  # bytes of a float32 value (caches, logits, recorded weights)
STEP_WORK = 5_000_000  # one decoding step of one batch: ~100 small ops of dispatch, ~1 ms
CANDIDATE_WORK = 60_000  # one candidate of constrained beam search (Python: scored, banked, sorted)
HISTORY_WORK = 1_000  # one history token scanned by no_repeat_ngram (Python, per row per step)
EXPECTED_RATIO = 1.5  # output tokens per source token a free decode runs (French runs longer than English; a margin)


@dataclass(frozen=True)
class ModelShape:
    """The sizes decoding cost depends on (a run's `config.json` gives them: `from_config`).

    kind: "transformer" (encoder + decoder with cross-attention), "decoder-only" (one stack over source
    and target) or "bahdanau" (GRUs and one additive attention: D the hidden size, F three gates).
    """

    kind: str
    layers: int  # N, blocks per stack
    width: int  # D
    heads: int  # H
    ffn: int  # F, the FFN's inner width
    vocab: int  # V, target vocabulary
    decoder_layers: int | None = None  # N', decoder blocks of a transformer; None = layers

    @property
    def decoder_depth(self) -> int:
        """N': the decoder's blocks (`layers` unless a transformer's decoder_layers says otherwise)."""
        return self.layers if self.decoder_layers is None else self.decoder_layers

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """From a run's config (`{"model_type": ..., "model": {...}}`); missing sizes count as 1."""
        kind = str(config.get("model_type", "transformer"))
        m = config.get("model") or {}

        def size(key: str, default: int = 1) -> int:
            v = m.get(key, default)
            return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default

        D = size("num_hiddens")
        if kind == "bahdanau":
            return cls(kind, size("num_layers"), D, 1, 3 * D, size("tgt_vocab_size"))
        decoder = (size("decoder_layers", 0) or None) if kind == "transformer" else None  # None: num_layers
        heads, ffn, vocab = size("num_heads"), size("ffn_num_hiddens"), size("tgt_vocab_size")
        return cls(kind, size("num_layers"), D, heads, ffn, vocab, decoder)


@dataclass(frozen=True)
class Cost:
    """An estimate: `work` in multiply-add equivalents, `peak_bytes` at the worst moment, and the rows
    and steps it assumed (for messages)."""

    work: float
    peak_bytes: float
    rows: int  # decoder rows: sentences x hypotheses kept per sentence
    steps: int  # the most steps one sentence runs (see the module docstring)


def recorded_weights(shape: ModelShape, Ls: int, Lt: int) -> int:
    """Attention weights one recorded forward keeps for one sentence of Ls source and Lt target
    positions: H heads x (N x Ls² + N' x (Lt² + Lt·Ls)) for a Transformer or a decoder-only model (its
    three views), Lt·Ls for Bahdanau's one attention."""
    if shape.kind not in THREE_VIEWS:
        return Lt * Ls
    return shape.heads * (shape.layers * Ls * Ls + shape.decoder_depth * (Lt * Lt + Lt * Ls))


def _hypotheses(options: DecodeOptions) -> int:
    """Decoder rows per sentence: the beam, or with sampling / greedy search n_best independent rows."""
    return options.n_best if options.sample or options.beam == 1 else options.beam


def _steps_run(S: int, limit: int, options: DecodeOptions, phrases: Sequence[str]) -> int:
    """Steps a row of a source of S tokens runs: about EXPECTED_RATIO x S + 2 (<eos> and margin), at
    least min_len + 1 and every constraint's characters + 1 (a phrase's tokens are at most its
    characters: an upper bound that needs no vocabulary), at most its output `limit`."""
    forced = max(options.min_len, sum(len(p) for p in phrases)) + 1
    return min(limit, max(forced, math.ceil(EXPECTED_RATIO * S) + 2))


def _step_work(shape: ModelShape, S: int, T: int) -> float:
    """Multiply-adds of T decoding steps of one row over a source of S tokens."""
    N, D, F, V = shape.decoder_depth, shape.width, shape.ffn, shape.vocab
    if shape.kind == "decoder-only":  # one stack: the source is keys of every step's self-attention
        return T * (N * (4 * D * D + 2 * D * F + 2 * S * D) + D * V) + N * D * T * (T + 1)
    per_step = N * (6 * D * D + 2 * D * F + 2 * S * D) + D * V  # self, cross (q, o), FFN; output projection
    return T * per_step + N * D * T * (T + 1)  # self-attention over the steps so far


def _forward_work(shape: ModelShape, S: int, T: int) -> float:
    """Multiply-adds of one full forward (encoder over S, decoder over T: the alignment's and the maps')."""
    N, Nd, D, F = shape.layers, shape.decoder_depth, shape.width, shape.ffn
    encoder = N * (S * (4 * D * D + 2 * D * F) + 2 * D * S * S)
    return encoder + Nd * (T * (4 * D * D + 2 * D * F) + 2 * D * (T * T + S * T)) + T * D * shape.vocab


def decode_cost(
    shape: ModelShape,
    sources: Sequence[int],
    outputs: Sequence[int],
    options: DecodeOptions | None = None,
    *,
    batch_size: int = 256,
    workers: int = 1,
    maps: bool = False,
) -> Cost:
    """The cost of decoding sentences of `sources[i]` tokens (<eos> included) to at most `outputs[i]`
    tokens each, with `options` (None: greedy). batch_size / workers: sentences per batch and batches
    decoded at once (peak memory counts `workers` of the largest). maps: the explorer's recorded forward
    of the best hypothesis (every attention map kept).

    Examples:
        >>> shape = ModelShape("transformer", layers=2, width=32, heads=2, ffn=64, vocab=500)
        >>> small = decode_cost(shape, [6], [22])
        >>> forced = DecodeOptions(beam=8, n_best=8, min_len=1023, align=True)  # every row runs 1024 steps
        >>> big = decode_cost(shape, [6] * 50, [1024] * 50, forced)
        >>> big.rows, big.peak_bytes > 1e9 > small.peak_bytes, big.work > 1000 * small.work
        (400, True, True)
    """
    if len(sources) != len(outputs):
        raise ValueError(f"sources has {len(sources)} lengths but outputs has {len(outputs)}")
    options = options or DecodeOptions()
    n, R = len(sources), _hypotheses(options)
    if n == 0:
        return Cost(0.0, 0.0, 0, 0)
    N, Nd, D, F, V, H = shape.layers, shape.decoder_depth, shape.width, shape.ffn, shape.vocab, shape.heads
    work, longest = 0.0, 0
    cons = list(options.constraints)
    if cons and not isinstance(cons[0], str):  # phrases per sentence: each its own
        kinds = [(S, limit, options.for_sentence(i, n)[1], 1) for i, (S, limit) in enumerate(zip(sources, outputs))]
    else:  # the same options for all: once per distinct (source, limit), times how many (a file: a few dozen)
        phrases = options.for_sentence(0, n)[1]
        kinds = [(S, limit, phrases, c) for (S, limit), c in Counter(zip(sources, outputs)).items()]
    for S, limit, phrases, count in kinds:
        T = _steps_run(S, limit, options, phrases)
        longest = max(longest, T)
        one = float(N * (S * (4 * D * D + 2 * D * F) + 2 * S * S * D))  # the encoder, once per sentence
        one += R * _step_work(shape, S, T)
        one += R * T * (len(phrases) + 2 * R) * CANDIDATE_WORK if phrases else 0.0
        one += R * T * (T + 1) / 2 * HISTORY_WORK if options.no_repeat_ngram else 0.0
        if options.align:
            one += options.n_best * _forward_work(shape, S, T)
        if maps:
            one += _forward_work(shape, S, T)
        work += count * one
    batches = math.ceil(n / batch_size)
    work += batches * longest * STEP_WORK

    # Decoding: `workers` batches of the longest sentences at once; per row its caches (self over T,
    # cross over S: keys and values per layer), 4 copies of the logits (logits, log-probs, totals, top-k).
    S_max, T_max = max(sources), max(outputs)
    rows = min(n, batch_size) * min(workers, batches) * R
    decoding = rows * (2 * Nd * D * (S_max + T_max) + 4 * V + 2 * T_max + 4 * (F + 4 * D)) * FLOAT
    decoding += min(n, batch_size) * min(workers, batches) * H * S_max * S_max * FLOAT  # encoder scores
    # The alignment: every hypothesis of every sentence in one recorded forward.
    aligned = n * options.n_best if options.align else 0
    kept = recorded_weights(shape, S_max, T_max) + (N * S_max + Nd * T_max) * (
        F + 4 * D
    )  # what one recorded forward keeps
    recorded = aligned * kept * FLOAT
    if maps:
        recorded += kept * FLOAT
    return Cost(work=work, peak_bytes=max(decoding, recorded), rows=n * R, steps=longest)


# The options whose size multiplies the cost, in the order a message lists them; each with the value
# that costs least (texts: one text).
_LOWER = (("max_len", None), ("beam", 1), ("n_best", 1), ("align", False), ("constraints", ()), ("no_repeat_ngram", 0))


def translation_cost(
    translator, sources: Sequence[int], options: DecodeOptions | None = None, *, maps: bool = False,
    workers: int = 1,
) -> Cost:  # fmt: skip
    """`decode_cost` for a `Translator`: its config's sizes, each source's output limit
    (`Translator.output_limit` with options.max_len) and its batch size. Reads attributes only."""
    max_len = None if options is None else options.max_len
    # One limit per distinct length: a file's tens of thousands of sentences have a few dozen lengths.
    limits = {S: translator.output_limit(S, max_len) for S in set(sources)}
    outputs = [limits[S] for S in sources]
    shape = ModelShape.from_config(translator.config)
    batch = getattr(translator, "batch_size", 256)
    return decode_cost(shape, sources, outputs, options, batch_size=batch, workers=workers, maps=maps)


def over_budget(
    translator,
    sources: Sequence[int],
    options: DecodeOptions | None,
    *,
    max_work: float | None,
    max_bytes: float | None,
    work_flag: str = "",
    bytes_flag: str = "",
    maps: bool = False,
    workers: int = 1,
) -> str | None:
    """None if decoding `sources` (token counts, <eos> included) with `options` fits both budgets, else
    one line: what it would take, the budget (and the setting that sets it: work_flag, bytes_flag), and
    the option to lower first — the one whose cheapest value saves most — then the others that count.

    Examples:
        >>> class Tiny:  # what over_budget reads of a Translator
        ...     config = {"model": {"num_layers": 2, "num_hiddens": 32, "num_heads": 2, "ffn_num_hiddens": 64,
        ...                         "tgt_vocab_size": 500}}
        ...     batch_size = 256
        ...     def output_limit(self, S, max_len=None): return max_len or 2 * S + 10
        >>> t = Tiny()
        >>> print(over_budget(t, [6], None, max_work=1e12, max_bytes=2**30))
        None
        >>> opts = DecodeOptions(beam=8, n_best=8, min_len=1023, max_len=1024, align=True)
        >>> print(over_budget(t, [6] * 50, opts, max_work=None, max_bytes=2**30, bytes_flag="--max-request-mb"))
        ... # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
        this request would take about ... GB of memory (estimated before any work: 400 rows x 1024 steps), over
        1.0 GB (--max-request-mb); lower max_len (1024) first (also counting: ...)
    """

    def cost_of(opts: DecodeOptions | None, srcs: Sequence[int] = sources) -> Cost:
        return translation_cost(translator, srcs, opts, maps=maps, workers=workers)

    cost = cost_of(options)
    what, budget, flag = "", 0.0, ""
    if max_bytes is not None and cost.peak_bytes > max_bytes:
        what, budget, flag = "bytes", max_bytes, bytes_flag
    elif max_work is not None and cost.work > max_work:
        what, budget, flag = "work", max_work, work_flag
    if not what:
        return None

    def size(c: Cost) -> float:
        return c.peak_bytes if what == "bytes" else c.work

    opts = options or DecodeOptions()
    savings: list[tuple[float, str]] = []
    for name, cheap in _LOWER:
        value = getattr(opts, name)
        if value == cheap or (name == "constraints" and not value):
            continue
        try:
            cheaper = cost_of(_cheaper(opts, name, cheap))
        except ValueError:  # that change alone does not make valid options
            continue
        shown = name if value is True else f"{name} ({len(value) if name == 'constraints' else value})"
        savings.append((size(cost) - size(cheaper), shown))
    if len(sources) > 1:
        one = cost_of(opts, [max(sources)])
        savings.append((size(cost) - size(one), f"the number of texts ({len(sources)})"))
    savings = [s for s in sorted(savings, key=lambda s: -s[0]) if s[0] > 0]
    if what == "bytes":
        amount, limit = f"about {_gb(cost.peak_bytes)} of memory", _gb(budget)
    else:
        amount, limit = f"about {cost.work / 1e9:,.0f} G multiply-adds of work", f"{budget / 1e9:,.0f} G"
    line = f"this request would take {amount} (estimated before any work: {cost.rows} rows x {cost.steps} steps)"
    line += f", over {limit}" + (f" ({flag})" if flag else "")
    if savings:
        line += f"; lower {savings[0][1]} first"
        rest = [s for _, s in savings[1:]]
        line += f" (also counting: {', '.join(rest)})" if rest else ""
    return line


AUTO_FACTOR = 4  # the default work budget: this many reference requests
AUTO_SOURCE = 32  # source tokens (<eos> included) of the reference requests' sentences


def default_budget(translator, texts: int) -> float:
    """The work one request may cost by default: AUTO_FACTOR x the larger of two reference requests —
    `texts` sentences of AUTO_SOURCE tokens at the largest beam and default output limits, and one such
    sentence with every option at its largest (beam, n_best, max_len, align, recorded maps) — so each
    of those fits and a request may cost a few of them."""
    plain = translation_cost(translator, [AUTO_SOURCE] * texts, DecodeOptions(beam=MAX_BEAM_SERVED))
    most = DecodeOptions(beam=MAX_BEAM_SERVED, n_best=MAX_BEAM_SERVED, max_len=MAX_OUTPUT_TOKENS, align=True)
    single = translation_cost(translator, [AUTO_SOURCE], most, maps=True)
    return AUTO_FACTOR * max(plain.work, single.work)


def machine_verdict(
    translator, sources: Sequence[int], options: DecodeOptions | None, memory: int | None, workers: int = 1
) -> tuple[str | None, str | None]:
    """(refusal, warning) for decoding `sources` here: a refusal when the estimated peak memory exceeds
    `memory` (this machine's, `attnlab.utils.runtime.memory_bytes`); a warning when one sentence alone
    would cost more than a default server accepts (`default_budget`), as options multiplied past any
    use (an output limit of 1024, a thousand constraints) make it."""
    if not sources:
        return None, None
    refusal = over_budget(
        translator, sources, options, max_work=None, max_bytes=memory, bytes_flag="this machine's memory",
        workers=workers,
    )  # fmt: skip
    warning = over_budget(translator, [max(sources)], options, max_work=default_budget(translator, 64), max_bytes=None)
    if warning is not None:
        warning = warning.replace("this request", "each sentence", 1) + "; it may run for a long time"
    return refusal, warning


def _cheaper(options: DecodeOptions, name: str, value: Any) -> DecodeOptions:
    changes: dict[str, Any] = {name: value}
    if name == "beam" and not options.sample:
        changes["n_best"] = 1  # n_best may not exceed the beam
    if name == "align":
        changes.update(align_layer=None, align_heads=None)
    if name == "max_len":
        changes["min_len"] = 0  # min_len may not exceed max_len
    return replace(options, **changes)


def _gb(n: float) -> str:
    return f"{n / 2**30:,.1f} GB" if n >= 2**30 else f"{n / 2**20:,.0f} MB"
