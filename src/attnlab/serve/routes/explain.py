"""POST /api/explain: one sentence translated with every attention map its translation used (the
explorer page's call), decoded on the pool of explorer threads (pool.py)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from attnlab.analysis.explanation import check_text, explain, head_masks_for
from attnlab.analysis.heads import head_confidence
from attnlab.analysis.subwords import merge_subwords
from attnlab.decoding.translator import InputError, TextTooLong

from ..budget import explain_bytes_bound, request_refusal
from ..context import ServedDep
from ..errors import POST_ERRORS, busy, error, responses
from ..options import explorer_options
from ..pool import Busy
from ..schemas import ExplainRequest, ExplainResponse

CONFIDENCE_SOURCE = (
    "this translation's confidence (Voita et al. 2019: mean of each head's largest weight); "
    "no heads.json found, run `attnlab heads` for measured importance"
)
router = APIRouter()


def explain_timed(
    translator,
    text: str,
    options=None,
    heads_off: dict | None = None,
    trace: bool = True,
    merge: bool = False,
    importance: dict | None = None,
) -> dict:
    """The response body of one explanation, with its decoding time."""
    t0 = time.perf_counter()
    exp = explain(translator, text, options, heads_off=heads_off, trace=trace)
    # Confidence on the model's own tokens (before any merge): it describes the heads, not the words.
    imp = importance or {"source": CONFIDENCE_SOURCE, "values": head_confidence(exp)}
    out = (merge_subwords(exp) if merge else exp).to_dict()
    out["importance"] = imp
    out["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return out


@router.post("/api/explain", response_model=ExplainResponse, responses=responses(*POST_ERRORS))
async def explain_sentence(req: ExplainRequest, request: Request, s: ServedDep):
    """Translate one sentence and return every attention map (encoder self, decoder self, cross per
    layer and head), the tokens, the n-best list and, with options.align, the word alignment."""
    translator, limits = s.translator, s.limits
    try:
        ids = check_text(translator, req.text)
        heads_off = req.heads_off.model_dump() if req.heads_off is not None else None
        head_masks_for(translator.model, heads_off)  # a bad mask is a 422 before any queueing
        try:
            resolved = explorer_options(translator, ids, req.options, req.beam, limits.max_beam)
        except ValueError as exc:
            return error(422, f"options: {exc}", request)
        refusal = request_refusal(translator, limits, [len(ids) + 1], resolved, maps=True)
        if refusal is not None:
            return error(413, refusal, request)
        traced = req.trace and resolved.plain
        size = explain_bytes_bound(translator, len(ids) + 1, resolved.beam if traced else 1, resolved)
        if size > limits.max_response_bytes:
            return error(
                413,
                f"this sentence's attention maps could take {size} bytes, over the "
                f"explorer's limit of {limits.max_response_bytes} (--max-response-bytes); "
                "shorten it, or use POST /api/translations (no maps)",
                request,
            )
        return await s.pool.run(
            explain_timed, req.text, resolved, heads_off, req.trace, req.merge_subwords, s.importance
        )
    except Busy as exc:
        return busy(request, exc)
    except TextTooLong as exc:
        return error(413, str(exc), request)
    except InputError as exc:
        return error(422, str(exc), request)


__all__ = ["CONFIDENCE_SOURCE", "explain_timed", "router"]
