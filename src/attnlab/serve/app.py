"""The attention explorer's HTTP API and page: `create_app(translator)` -> a FastAPI app.

    POST /api/translate    {"text": "i'm home .", "beam": 1}  -> tokens, translation, every attention map
    POST /api/translations {"texts": ["go .", ...], "beam": 1} -> translations only, micro-batched
    GET  /api/model                                             -> config, vocabulary sizes, limits, data credit
    GET  /api/positions?source_len=5&target_len=4               -> the position scheme's bias or rotation per head
    GET  /healthz                                               -> {"status": "ok"}
    GET  /                                                      -> the page (static/index.html + app.js + style.css)
    GET  /docs, /openapi.json                                   -> the API reference (apidocs.py), its schema

Two paths, two costs: `/api/translate` (the page's) decodes one sentence per request on a pool of
threads with their own model copies and records every attention map (pool.py); `/api/translations`
(for programs) gathers the sentences of concurrent requests into one batched decode (batcher.py).
Both are bounded queues answering 503 + Retry-After when full. Every request passes GuardMiddleware
(body size and read time, request id; guard.py). No input yields a 5xx: a 500 means a bug, and says
only "internal error" with the request id (the traceback goes to the server's log).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnlab import __version__
from attnlab.analysis.explanation import (
    MAX_CHARS,
    attention_layout,
    check_text,
    explain,
    head_kinds,
    head_masks_for,
)
from attnlab.analysis.heads import head_confidence
from attnlab.analysis.positions import position_maps, position_numbers
from attnlab.analysis.subwords import merge_subwords
from attnlab.data import ATTRIBUTION
from attnlab.decoding.options import DEFAULTABLE
from attnlab.decoding.translator import InputError, TextTooLong

from .apidocs import api_docs_html
from .batcher import MicroBatcher
from .guard import GuardMiddleware, Limits, safe_text
from .memory import IdleTrim, TrimWhenIdle
from .options import decode_options, explorer_options, options_bytes, translation_result
from .pool import Busy, TooLarge, TranslatorPool
from .schemas import (
    ErrorResponse,
    Health,
    ModelInfo,
    PositionMaps,
    TranslateRequest,
    TranslateResponse,
    TranslationsRequest,
    TranslationsResponse,
)
from .sizes import attention_numbers

POSITION_MAX_LEN = 1024  # longest /api/positions source for a model without a source limit
STATIC_DIR = Path(str(resources.files("attnlab.serve") / "static"))
log = logging.getLogger("attnlab.serve")


CONFIDENCE_SOURCE = (
    "this translation's confidence (Voita et al. 2019: mean of each head's largest weight); "
    "no heads.json found, run `attnlab heads` for measured importance"
)


def _explain_timed(
    translator,
    text: str,
    beam: int,
    heads_off: dict | None = None,
    trace: bool = True,
    merge: bool = False,
    importance: dict | None = None,
    options=None,
) -> dict:
    t0 = time.perf_counter()
    exp = explain(translator, text, beam, heads_off=heads_off, trace=trace, options=options)
    # Confidence on the model's own tokens (before any merge): it describes the heads, not the words.
    imp = importance or {"source": CONFIDENCE_SOURCE, "values": head_confidence(exp)}
    out = (merge_subwords(exp) if merge else exp).to_dict()
    out["importance"] = imp
    out["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return out


def model_origin(config: dict) -> str:
    """Where a run's model came from, as its config says (import_hf writes data.source = "hf")."""
    data = config.get("data") or {}
    if data.get("source") == "hf":
        return f"imported from Hugging Face {data.get('hf_model_type', '')} ({data.get('hf_source', '?')})"
    return "trained with attnlab" + (f" on {Path(str(data['path'])).name}" if data.get("path") else "")


def explain_bytes_bound(translator, src_len: int, beam: int = 1, options=None) -> int:
    """Most bytes the JSON of one explanation can take for a source of `src_len` tokens (<eos> included).

    Every weight is printed with 4 decimals ("0.1234," = 7 bytes; 8 counted for brackets); the output
    may run to the decoder's limit (options.max_len where given), + its <eos> row. Shape: N layers x H
    heads x (Ls² + Lt² + Lt·Ls) for a Transformer or a decoder-only model (its three views), Lt·Ls for
    Bahdanau. With beam > 1 the trace adds 2 x beam candidates of ~300 bytes per step; the n-best list and
    alignment add `options_bytes`.
    """
    max_len = None if options is None else options.max_len
    Ls, Lt = src_len, translator.output_limit(src_len, max_len) + 1
    numbers = attention_numbers(translator, Ls, Lt)  # per model type (sizes.py)
    trace = Lt * 2 * beam * 300 if beam > 1 else 0
    return 8 * numbers + 64 * (Ls + 2 * Lt) + 1024 + trace + options_bytes(Lt, Ls, options)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            parts.append(f"the request body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})")
            continue
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    # Locations echo client keys, which may hold lone surrogates: keep the message encodable.
    return safe_text("; ".join(parts) or "invalid request")


def _error(status: int, detail: str, request: Request | None = None, headers: dict | None = None) -> JSONResponse:
    rid = getattr(request.state, "request_id", None) if request is not None else None
    return JSONResponse(status_code=status, content={"detail": safe_text(detail), "request_id": rid}, headers=headers)


def _busy(request: Request, exc: Busy) -> JSONResponse:
    return _error(503, str(exc), request, headers={"Retry-After": "1"})


# --------------------------------------------------------------------------- app
def create_app(
    translator,
    workers: int = 1,
    max_pending: int = 128,
    limits: Limits | None = None,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    batch_workers: int = 1,
    max_batch_pending: int = 1024,
    importance: dict | None = None,
    trim_interval_s: float = 1.0,
) -> FastAPI:
    """The explorer and the batching API for one loaded `Translator` (see `attnlab.runs.load_translator`).

    workers/max_pending: the explorer's threads and queue bound; max_batch/max_wait_ms/batch_workers/
    max_batch_pending: the micro-batcher's (see batcher.py); limits: see guard.Limits.
    importance: {"source": str, "values": {kind: [layer][head]}} for the head-importance strip (e.g.
    from `attnlab.analysis.load_head_importance`); None: each translation's own confidence.
    trim_interval_s: least time between two heap trims when the server goes idle (memory.IdleTrim).
    """
    limits = limits or Limits()
    pool = TranslatorPool(translator, workers, max_pending)
    batcher = MicroBatcher(
        translator, max_batch=max_batch, max_wait_ms=max_wait_ms, max_pending=max_batch_pending, workers=batch_workers
    )

    @asynccontextmanager
    async def lifespan(app):
        yield
        pool.shutdown()
        batcher.shutdown()

    app = FastAPI(
        title="attnlab attention explorer",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc come from a CDN; /docs below needs nothing from outside
        redoc_url=None,
        description="Translate English to French and see every attention map the Transformer used.",
    )
    trim = IdleTrim(lambda: pool.pending > 0 or batcher.pending > 0, trim_interval_s)
    app.state.pool, app.state.batcher, app.state.limits, app.state.trim = pool, batcher, limits, trim
    app.add_middleware(TrimWhenIdle, trim=trim)  # trims after a response has gone out
    app.add_middleware(GuardMiddleware, limits=limits)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError):
        return _error(422, _validation_message(exc), request)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), request, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        # A bug, never the client's fault: log the traceback with the request id, and tell the client
        # only the id. Exception text can hold paths, input or internals, so it never leaves the server.
        rid = getattr(request.state, "request_id", None)
        log.error("internal error in %s %s (request %s)", request.method, request.url.path, rid, exc_info=exc)
        return JSONResponse(
            status_code=500,
            content={
                "detail": f"internal error (request id {rid}); the server's log has the details",
                "request_id": rid,
            },
            headers={"X-Request-ID": str(rid)},
        )

    def doc(*codes: int) -> dict:
        what = {
            400: "the body could not be read",
            408: f"the body took over {limits.body_timeout_s:g} s to arrive",
            413: f"body over {limits.max_body_bytes} bytes, text over {MAX_CHARS} characters, more texts "
            "than max_texts (GET /api/model), or attention maps over the response limit: never a retry",
            422: "empty text, too many tokens, wrong types, beam out of range, a head mask naming a "
            "kind, layer or head the model lacks, decoding options it refuses (the detail names the option)",
            431: f"request head over {limits.max_header_bytes} bytes",
            500: "a bug in the server (the detail carries only a request id)",
            503: "too many requests waiting; retry after Retry-After seconds",
        }
        return {c: {"model": ErrorResponse, "description": what[c]} for c in codes}

    post_errors = doc(400, 408, 413, 422, 431, 500, 503)

    @app.post("/api/translate", response_model=TranslateResponse, responses=post_errors)
    async def translate(req: TranslateRequest, request: Request):
        try:
            ids = check_text(translator, req.text)
            heads_off = req.heads_off.model_dump() if req.heads_off is not None else None
            head_masks_for(translator.model, heads_off)  # a bad mask is a 422 before any queueing
            try:
                resolved = explorer_options(translator, ids, req.options, req.beam, limits.max_beam)
            except ValueError as exc:
                return _error(422, f"options: {exc}", request)
            beam, options = resolved.beam, resolved if req.options is not None else None
            traced = req.trace and (options is None or options.plain)
            size = explain_bytes_bound(translator, len(ids) + 1, beam if traced else 1, options)
            if size > limits.max_response_bytes:
                return _error(
                    413,
                    f"this sentence's attention maps could take {size} bytes, over the "
                    f"explorer's limit of {limits.max_response_bytes} (--max-response-bytes); "
                    "shorten it, or use POST /api/translations (no maps)",
                    request,
                )
            return await pool.run(
                _explain_timed, req.text, beam, heads_off, req.trace, req.merge_subwords, importance, options
            )
        except Busy as exc:
            return _busy(request, exc)
        except TextTooLong as exc:
            return _error(413, str(exc), request)
        except InputError as exc:
            return _error(422, str(exc), request)

    @app.post("/api/translations", response_model=TranslationsResponse, responses=post_errors)
    async def translations(req: TranslationsRequest, request: Request):
        t0 = time.perf_counter()
        if len(req.texts) > limits.max_texts:
            return _error(
                413,
                f"{len(req.texts)} texts in one request; this server takes at most {limits.max_texts} "
                "(--max-texts); split them",
                request,
            )
        try:
            batcher.check_fits(len(req.texts))
        except TooLarge as exc:
            return _error(413, str(exc), request)
        for i, text in enumerate(req.texts):
            try:
                check_text(translator, text)
            except TextTooLong as exc:
                return _error(413, f"texts[{i}]: {exc}", request)
            except InputError as exc:
                return _error(422, f"texts[{i}]: {exc}", request)
        try:
            resolved = decode_options(translator, req.options, req.beam, limits.max_beam)
        except ValueError as exc:
            return _error(422, f"options: {exc}", request)
        beam, options = resolved.beam, resolved if req.options is not None else None
        try:
            out = await batcher.translate(req.texts, beam, options)
        except Busy as exc:
            return _busy(request, exc)
        except ValueError as exc:  # options that do not fit these texts (a prefix per text, say)
            return _error(422, f"options: {exc}", request)
        elapsed = round((time.perf_counter() - t0) * 1000, 1)
        if options is None:
            return TranslationsResponse(translations=out, beam=beam, results=None, elapsed_ms=elapsed)
        results = [translation_result(t) for t in out]
        return TranslationsResponse(
            translations=[r.text for r in results], beam=beam, results=results, elapsed_ms=elapsed
        )

    @app.get("/api/model", response_model=ModelInfo, responses=doc(431, 500))
    async def model_info():
        cfg = translator.config
        model = translator.model
        positions, _, num_kv_heads = attention_layout(model)
        return ModelInfo(
            model_type=cfg.get("model_type", type(model).__name__.lower()),
            model=cfg.get("model", {}),
            origin=model_origin(cfg),
            parameters=sum(p.numel() for p in model.parameters()),
            heads={k: [getattr(m, "num_heads", 1) for m in ms] for k, ms in head_kinds(model).items()},
            positions=positions,
            num_kv_heads=num_kv_heads,
            importance_source=importance["source"] if importance else CONFIDENCE_SOURCE,
            src_vocab_size=len(translator.src_vocab),
            tgt_vocab_size=len(translator.tgt_vocab),
            max_source_tokens=translator.max_len,
            max_output_tokens=translator.max_output_len,
            max_chars=MAX_CHARS,
            max_beam=limits.max_beam,
            decoding={k: getattr(translator.defaults, k) for k in DEFAULTABLE},
            max_texts=min(limits.max_texts, batcher.max_pending),
            max_body_bytes=limits.max_body_bytes,
            max_response_bytes=limits.max_response_bytes,
            workers=pool.workers,
            data_attribution=ATTRIBUTION,
        )

    @app.get(
        "/api/positions", response_model=PositionMaps, response_model_exclude_none=True, responses=doc(413, 422, 431)
    )
    async def positions(source_len: int, target_len: int, request: Request):
        """What the position scheme adds to each head for a source of `source_len` tokens (<eos> included)
        and an output of `target_len`: ALiBi's or T5's bias, RoPE's angles, or the scheme's name only."""
        S, T = translator.max_len or POSITION_MAX_LEN, translator.max_output_len + 1
        if not (1 <= source_len <= S and 1 <= target_len <= T):
            return _error(
                422,
                f"source_len must lie in 1..{S} and target_len in 1..{T} (the longest source and output), "
                f"got {source_len} and {target_len}",
                request,
            )
        # Each number prints as "-0.0625," or so: 12 bytes counted. Built off the event loop.
        size = 12 * position_numbers(translator.model, source_len, target_len) + 1024
        if size > limits.max_response_bytes:
            return _error(
                413,
                f"these position maps could take {size} bytes, over the explorer's limit of "
                f"{limits.max_response_bytes} (--max-response-bytes); ask for shorter lengths",
                request,
            )
        return await asyncio.to_thread(position_maps, translator.model, source_len, target_len)

    @app.get("/healthz", response_model=Health, responses=doc(431))
    async def healthz():
        return {"status": "ok"}

    @app.get("/", include_in_schema=False)
    async def index():
        return FileResponse(STATIC_DIR / "index.html")

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return HTMLResponse(api_docs_html(app.openapi()))

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _version() -> str:
    return __version__


__all__ = [
    "ATTRIBUTION",
    "Limits",
    "MicroBatcher",
    "TranslateRequest",
    "TranslateResponse",
    "TranslationsRequest",
    "TranslationsResponse",
    "TranslatorPool",
    "create_app",
    "explain_bytes_bound",
    "model_origin",
]
