"""The attention explorer's HTTP API and page: `create_app(translator)` -> a FastAPI app.

    POST /api/explain      {"text": "i'm home .", "beam": 1}    -> tokens, translation, every attention map
    POST /api/translations {"texts": ["go .", ...], "beam": 1} -> translations only, micro-batched
    GET  /api/model                                             -> config, vocabulary sizes, limits, data credit
    GET  /api/positions?source_len=5&target_len=4               -> the position scheme's bias or rotation per head
    GET  /healthz                                               -> {"status": "ok"}
    GET  /                                                      -> the page (static/index.html + app.js + style.css)
    GET  /docs, /openapi.json                                   -> the API reference (apidocs.py), its schema

Each group of routes is a router in `routes/`. Two paths, two costs: `/api/explain` (the page's)
decodes one sentence per request on a pool of threads and records every attention map (pool.py);
`/api/translations` (for programs) gathers the sentences of concurrent plain requests into one batched
decode, and decodes a request with options on a lane of its own, so no plain request waits behind one
(batcher.py). Both are bounded queues answering 503 + Retry-After when full (the batcher: by estimated
work, and for a request that could not start within Limits.start_deadline_s), and both refuse a request
whose estimated cost is over the server's budget with 413 before queueing it (budget.py). Every request
passes GuardMiddleware (body size and read time, request id; guard.py). No input yields a 5xx: a 500
means a bug, and says only "internal error" with the request id (the traceback goes to the server's log).
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from attnlab import __version__

from .batcher import MicroBatcher
from .budget import queue_work
from .context import Served
from .errors import add_error_handlers
from .guard import GuardMiddleware, Limits
from .memory import IdleTrim, TrimWhenIdle
from .pool import TranslatorPool
from .routes import explain, model, pages, translations


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
        translator,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        max_pending=max_batch_pending,
        workers=batch_workers,
        max_work=queue_work(translator, limits),
        deadline_s=limits.start_deadline_s,
    )

    @asynccontextmanager
    async def lifespan(app):
        yield
        pool.shutdown()
        batcher.shutdown()

    app = FastAPI(
        title="attnlab attention explorer",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc come from a CDN; /docs (routes/pages.py) needs nothing from outside
        redoc_url=None,
        description="Translate English to French and see every attention map the Transformer used.",
    )
    trim = IdleTrim(lambda: pool.pending > 0 or batcher.pending > 0, trim_interval_s)
    app.state.served = Served(translator, pool, batcher, limits, trim, importance)
    app.add_middleware(TrimWhenIdle, trim=trim)  # trims after a response has gone out
    app.add_middleware(GuardMiddleware, limits=limits)
    add_error_handlers(app)
    for group in (explain, translations, model, pages):
        app.include_router(group.router)
    app.mount("/static", StaticFiles(directory=pages.STATIC_DIR), name="static")
    return app


__all__ = ["create_app"]
