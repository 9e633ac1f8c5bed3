"""Decoding options in the JSON API: the body's `options` (and `beam`, an alias of options.beam) over the
run's decoding defaults as a `DecodeOptions` within the server's bounds (the options' own, narrowed by
--max-beam), checked against one sentence for the explorer (`explorer_options`), the bytes they add to its
response, and a `Translation` as the batching API's result."""

from __future__ import annotations

import math
from typing import Any

from attnlab.analysis.explanation import MAX_CHARS
from attnlab.decoding.options import API_OPTIONS, DecodeOptions, option_fields
from attnlab.decoding.translator import Translation

from .schemas import Hypothesis, TranslationResult


def decode_options(translator, options: dict[str, Any] | None, beam: int | None, max_beam: int) -> DecodeOptions:
    """`options` (a JSON object, or None) and the body's `beam` (an alias of options.beam; None: not given) over
    the translator's defaults; ValueError (-> 422) for anything the library refuses, an option the API does not
    take (`API_OPTIONS`), two different beams, or a beam or n_best over `max_beam` (the server's --max-beam:
    work and the response's size)."""
    options = dict(options or {})
    inner = sorted(k for k in options if k not in API_OPTIONS and k in {f.name for f in option_fields()})
    if inner:  # DecodeOptions fields a caller of the library sets (trace: the body's own `trace`)
        raise ValueError(f"{', '.join(inner)} cannot be set here; the API's options are {', '.join(API_OPTIONS)}")
    if beam is not None and options.setdefault("beam", beam) != beam:
        raise ValueError(f"beam {beam} and options.beam {options['beam']} differ; give options.beam alone")
    opts = translator.defaults.merged(options)
    for name in ("beam", "n_best"):
        value = getattr(opts, name)
        if value > max_beam:
            raise ValueError(f"{name} must be at most {max_beam} on this server (--max-beam), got {value}")
    return opts


def explorer_options(translator, ids: list[int], options: dict[str, Any] | None, beam: int | None,
                     max_beam: int) -> DecodeOptions:  # fmt: skip
    """`decode_options` for POST /api/explain, also checked against this sentence and model before any
    queueing: its prefix and constraints in the target vocabulary and output limit, and the alignment's
    layer and heads. ValueError (-> 422) says what is wrong."""
    opts = decode_options(translator, options, beam, max_beam)
    if not isinstance(opts.prefix, (str, type(None))):
        raise ValueError("prefix: give one text (the explorer translates one sentence)")
    if opts.constraints and not isinstance(opts.constraints[0], str):
        raise ValueError("constraints: give a list of phrases (the explorer translates one sentence)")
    translator.encode_targets([ids], opts)
    if opts.align:
        translator.alignment_heads(opts.align_layer, opts.align_heads)
    return opts


def options_bytes(Lt: int, Ls: int, options: DecodeOptions | None) -> int:
    """Most bytes the n-best list and the alignment add to one explanation (Lt output rows, Ls source
    tokens): per hypothesis its text (64 bytes a token, escapes included) and fields; the alignment's
    pairs, words (the source's at most MAX_CHARS characters, 6 bytes each escaped) and token indices."""
    n = 1 if options is None else options.n_best
    nbest = n * (64 * Lt + 128)
    align = 0 if options is None or not options.align else 16 * Lt + 64 * Lt + 6 * MAX_CHARS + 8 * (Ls + Lt) + 256
    return nbest + align


def _hypothesis(t: Translation) -> dict[str, Any]:
    score = None if math.isnan(t.score) else t.score
    alignment = None if t.alignment is None else [list(p) for p in t.alignment]
    return {"text": t.text, "score": score, "alignment": alignment}


def translation_result(t: Translation) -> TranslationResult:
    nbest = [Hypothesis(**_hypothesis(h)) for h in (t.nbest or [t])]
    return TranslationResult(**_hypothesis(t), nbest=nbest)


__all__ = ["decode_options", "explorer_options", "options_bytes", "translation_result"]
