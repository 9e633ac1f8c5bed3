"""Decoding options in the JSON API: the body's `options` as a `DecodeOptions` within the server's bounds,
and a `Translation` as the response's result."""

from __future__ import annotations

import math
from typing import Any

from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.translator import Translation

from .schemas import MAX_BEAM, Hypothesis, TranslationResult


def decode_options(options: dict[str, Any], beam: int) -> DecodeOptions:
    """`options` (a JSON object) with the body's `beam`; ValueError (-> 422) for anything the library
    refuses, a `beam` inside options, or more than MAX_BEAM hypotheses per text (the response's size)."""
    if "beam" in options:
        raise ValueError("give the beam as the body's `beam`, not inside options")
    n_best = options.get("n_best", 1)
    if isinstance(n_best, int) and not isinstance(n_best, bool) and n_best > MAX_BEAM:
        raise ValueError(f"n_best must be at most {MAX_BEAM} on this server, got {n_best}")
    return DecodeOptions.from_dict({**options, "beam": beam})


def _hypothesis(t: Translation) -> dict[str, Any]:
    score = None if math.isnan(t.score) else t.score
    alignment = None if t.alignment is None else [list(p) for p in t.alignment]
    return {"text": t.text, "score": score, "alignment": alignment}


def translation_result(t: Translation) -> TranslationResult:
    nbest = [Hypothesis(**_hypothesis(h)) for h in (t.nbest or [t])]
    return TranslationResult(**_hypothesis(t), nbest=nbest)


__all__ = ["decode_options", "translation_result"]
