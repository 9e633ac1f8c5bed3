"""The page and the reference: GET / (the explorer), GET /docs (the API reference, built from the
schema with nothing from outside), GET /healthz; the page's files are mounted at /static by the app."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse

from ..apidocs import api_docs_html
from ..errors import responses
from ..schemas import Health

STATIC_DIR = Path(str(resources.files("attnlab.serve") / "static"))
router = APIRouter()


@router.get("/healthz", response_model=Health, responses=responses(431))
async def healthz():
    return {"status": "ok"}


@router.get("/", include_in_schema=False)
async def index():
    return FileResponse(STATIC_DIR / "index.html")


@router.get("/docs", include_in_schema=False)
async def docs(request: Request):
    return HTMLResponse(api_docs_html(request.app.openapi()))


__all__ = ["STATIC_DIR", "router"]
