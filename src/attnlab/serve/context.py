"""What every route of one app shares: the translator, its two queues, the limits, the heap trim and
the head importance, held in `app.state.served` and handed to a route by `Depends(served)`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from .batcher import MicroBatcher
from .guard import Limits
from .memory import IdleTrim
from .pool import TranslatorPool


@dataclass(frozen=True)
class Served:
    translator: Any  # an attnlab.decoding.Translator
    pool: TranslatorPool  # the explorer's threads (POST /api/explain)
    batcher: MicroBatcher  # the batching path (POST /api/translations)
    limits: Limits
    trim: IdleTrim  # hands freed heap back when the server goes idle
    importance: dict | None = None  # {"source", "values"} for the head-importance strip; None: confidence


def served(request: Request) -> Served:
    return request.app.state.served


ServedDep = Annotated[Served, Depends(served)]  # a route's parameter `s: ServedDep`

__all__ = ["Served", "ServedDep", "served"]
