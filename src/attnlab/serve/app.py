"""The attention explorer's HTTP API and page: `create_app(translator)` -> a FastAPI app.

    POST /api/translate {"text": "i'm home .", "beam": 1}  -> tokens, translation, every attention map
    GET  /api/model                                         -> config, vocabulary sizes, limits, data credit
    GET  /healthz                                           -> {"status": "ok"}
    GET  /                                                  -> the page (static/index.html + app.js + style.css)

Inference runs in a bounded pool of `workers` threads, so a burst of requests queues instead of
oversubscribing the CPU. Each worker thread owns a copy of the model: `record_attention` marks the
model's modules while it runs, so two threads sharing one model would record into each other.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from attnlab.data import ATTRIBUTION
from attnlab.explain import MAX_CHARS, InputError, TextTooLong, explain

MAX_BEAM = 8
STATIC_DIR = Path(str(resources.files("attnlab.serve") / "static"))


# --------------------------------------------------------------------------- schema
class TranslateRequest(BaseModel):
    # strict: a number for text or a string for beam is a client bug worth reporting, not coercing.
    model_config = ConfigDict(strict=True, extra="forbid")

    text: str = Field(description=f"an English sentence, 1 to {MAX_CHARS} characters", examples=["i'm home ."])
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="beam size; 1 = greedy decoding")


class AttentionMaps(BaseModel):
    encoder_self: list[list[list[list[float]]]] = Field(description="[layer][head][Ls][Ls] source self-attention")
    decoder_self: list[list[list[list[float]]]] = Field(description="[layer][head][Lt][Lt] causal target self-attention")
    cross: list[list[list[list[float]]]] = Field(description="[layer][head][Lt][Ls] encoder–decoder attention")


class TranslateResponse(BaseModel):
    text: str
    translation: str = Field(description="the detokenized translation")
    src_tokens: list[str] = Field(description="source tokens as the model saw them (<unk> for unknown words, <eos>)")
    tgt_tokens: list[str] = Field(description="the token each decoder position produced (output + <eos>)")
    tgt_input_tokens: list[str] = Field(description="decoder inputs (<bos> + output): keys of decoder self-attention")
    beam: int
    finished: bool = Field(description="False if decoding stopped at the length limit without <eos>")
    attention: AttentionMaps
    elapsed_ms: float = Field(description="server time for decoding and recording")


class ModelInfo(BaseModel):
    model_type: str
    model: dict
    src_vocab_size: int
    tgt_vocab_size: int
    max_source_tokens: int | None = Field(description="longest source accepted, <eos> included")
    max_output_tokens: int
    max_chars: int
    max_beam: int
    workers: int
    data_attribution: str


class ErrorResponse(BaseModel):
    detail: str


# --------------------------------------------------------------------------- worker pool
class Busy(Exception):
    """More requests are waiting than the pool accepts (HTTP 503: the client should retry)."""


class TranslatorPool:
    """`workers` threads, each with its own copy of the translator's model (see the module docstring).

    At most `max_pending` requests wait or run at once; beyond that `run` raises Busy at once, so a
    flood gets a quick 503 instead of an ever-growing queue and timeouts.
    """

    def __init__(self, translator, workers: int, max_pending: int = 128):
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be a positive integer, got {max_pending!r}")
        self.base, self.workers, self.max_pending = translator, workers, max_pending
        self.pending = 0  # touched only on the event loop's thread, so no lock
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnlab-serve")
        self._local = threading.local()
        self._copy_lock = threading.Lock()

    def _replica(self):
        t = getattr(self._local, "translator", None)
        if t is None:
            with self._copy_lock:
                t = copy.copy(self.base)
                t.model = copy.deepcopy(self.base.model).eval()
            self._local.translator = t
        return t

    async def run(self, fn, *args):
        if self.pending >= self.max_pending:
            raise Busy(f"the explorer is busy: {self.pending} requests are already waiting; retry in a moment")
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, lambda: fn(self._replica(), *args))
        finally:
            self.pending -= 1

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def _explain_timed(translator, text: str, beam: int) -> dict:
    t0 = time.perf_counter()
    out = explain(translator, text, beam).to_dict()
    out["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return out


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            parts.append(f"the request body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})")
            continue
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


# --------------------------------------------------------------------------- app
def create_app(translator, workers: int = 1, max_pending: int = 128) -> FastAPI:
    """The explorer for one loaded `Translator` (see `attnlab.checkpoint.load_translator`)."""
    pool = TranslatorPool(translator, workers, max_pending)

    @asynccontextmanager
    async def lifespan(app):
        yield
        pool.shutdown()

    app = FastAPI(title="attnlab attention explorer", version=_version(), lifespan=lifespan,
                  description="Translate English to French and see every attention map the Transformer used.")
    app.state.pool = pool

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError):
        return JSONResponse(status_code=422, content={"detail": _validation_message(exc)})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        # Last resort: a JSON 500 the page can show, instead of a bare text/plain error.
        return JSONResponse(status_code=500, content={"detail": f"internal error: {type(exc).__name__}: {exc}"})

    bad = {413: {"model": ErrorResponse, "description": f"text longer than {MAX_CHARS} characters"},
           422: {"model": ErrorResponse, "description": "empty text, too many tokens, wrong types, beam out of range"},
           503: {"model": ErrorResponse, "description": "too many requests waiting; retry shortly"}}

    @app.post("/api/translate", response_model=TranslateResponse, responses=bad)
    async def translate(req: TranslateRequest):
        try:
            return await pool.run(_explain_timed, req.text, req.beam)
        except Busy as exc:
            return JSONResponse(status_code=503, content={"detail": str(exc)}, headers={"Retry-After": "1"})
        except TextTooLong as exc:
            return JSONResponse(status_code=413, content={"detail": str(exc)})
        except InputError as exc:
            return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.get("/api/model", response_model=ModelInfo)
    async def model_info():
        cfg = translator.config
        return ModelInfo(model_type=cfg.get("model_type", type(translator.model).__name__.lower()),
                         model=cfg.get("model", {}), src_vocab_size=len(translator.src_vocab),
                         tgt_vocab_size=len(translator.tgt_vocab), max_source_tokens=translator.max_len,
                         max_output_tokens=translator.max_output_len, max_chars=MAX_CHARS, max_beam=MAX_BEAM,
                         workers=pool.workers, data_attribution=ATTRIBUTION)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/", include_in_schema=False)
    async def index():
        return FileResponse(STATIC_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _version() -> str:
    from attnlab import __version__

    return __version__


__all__ = ["create_app", "TranslatorPool", "TranslateRequest", "TranslateResponse", "ATTRIBUTION", "MAX_BEAM"]
