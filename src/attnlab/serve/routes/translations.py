"""POST /api/translations: texts in, translations out (no attention maps), micro-batched with the
sentences of concurrent requests (batcher.py); with options, scores, n-best lists and alignments."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from attnlab.analysis.explanation import check_text
from attnlab.decoding.translator import InputError, TextTooLong

from ..budget import request_refusal, request_work
from ..context import ServedDep
from ..errors import POST_ERRORS, busy, error, responses
from ..options import decode_options, translation_result
from ..pool import Busy, TooLarge
from ..schemas import TranslationsRequest, TranslationsResponse

router = APIRouter()


@router.post("/api/translations", response_model=TranslationsResponse, responses=responses(*POST_ERRORS))
async def translate_texts(req: TranslationsRequest, request: Request, s: ServedDep):
    """Translate up to max_texts texts (GET /api/model); each answer in the order of the texts."""
    t0 = time.perf_counter()
    translator, limits = s.translator, s.limits
    if len(req.texts) > limits.max_texts:
        return error(
            413,
            f"{len(req.texts)} texts in one request; this server takes at most {limits.max_texts} "
            "(--max-texts); split them",
            request,
        )
    try:
        s.batcher.check_fits(len(req.texts))
    except TooLarge as exc:
        return error(413, str(exc), request)
    sources = []
    for i, text in enumerate(req.texts):
        try:
            sources.append(len(check_text(translator, text)) + 1)
        except TextTooLong as exc:
            return error(413, f"texts[{i}]: {exc}", request)
        except InputError as exc:
            return error(422, f"texts[{i}]: {exc}", request)
    try:
        resolved = decode_options(translator, req.options, req.beam, limits.max_beam)
        resolved.for_sentence(0, len(req.texts))  # a per-text list of the wrong length: 422, not a cost
    except ValueError as exc:
        return error(422, f"options: {exc}", request)
    beam, options = resolved.beam, resolved if req.options is not None else None
    refusal = request_refusal(translator, limits, sources, resolved)
    if refusal is not None:
        return error(413, refusal, request)
    try:
        out = await s.batcher.translate(req.texts, beam, options, request_work(translator, sources, resolved))
    except Busy as exc:
        return busy(request, exc)
    except ValueError as exc:  # options that do not fit these texts (a prefix per text, say)
        return error(422, f"options: {exc}", request)
    elapsed = round((time.perf_counter() - t0) * 1000, 1)
    if options is None:
        return TranslationsResponse(translations=out, beam=beam, results=None, elapsed_ms=elapsed)
    results = [translation_result(t) for t in out]
    texts = [r.text for r in results]
    return TranslationsResponse(translations=texts, beam=beam, results=results, elapsed_ms=elapsed)


__all__ = ["router"]
