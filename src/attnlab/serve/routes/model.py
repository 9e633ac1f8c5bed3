"""GET /api/model (what the served model is and the limits it is served under) and GET /api/positions
(what its position scheme adds to each head)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi import APIRouter, Request

from attnlab.analysis.explanation import MAX_CHARS, attention_layout, head_kinds
from attnlab.analysis.positions import position_maps, position_numbers
from attnlab.data import data_credit
from attnlab.decoding.options import DEFAULTABLE

from ..context import ServedDep
from ..errors import error, responses
from ..schemas import ModelInfo, PositionMaps
from .explain import CONFIDENCE_SOURCE

POSITION_MAX_LEN = 1024  # longest /api/positions source for a model without a source limit
router = APIRouter()


def model_origin(config: dict) -> str:
    """Where a run's model came from, as its config says (import_hf writes data.source = "hf")."""
    data = config.get("data") or {}
    if data.get("source") == "hf":
        return f"imported from Hugging Face {data.get('hf_model_type', '')} ({data.get('hf_source', '?')})"
    return "trained with attnlab" + (f" on {Path(str(data['path'])).name}" if data.get("path") else "")


@router.get("/api/model", response_model=ModelInfo, responses=responses(431, 500))
async def model_info(s: ServedDep):
    translator, limits = s.translator, s.limits
    cfg, model = translator.config, translator.model
    positions, _, num_kv_heads = attention_layout(model)
    return ModelInfo(
        model_type=cfg.get("model_type", type(model).__name__.lower()),
        model=cfg.get("model", {}),
        origin=model_origin(cfg),
        parameters=sum(p.numel() for p in model.parameters()),
        heads={k: [getattr(m, "num_heads", 1) for m in ms] for k, ms in head_kinds(model).items()},
        positions=positions,
        num_kv_heads=num_kv_heads,
        importance_source=s.importance["source"] if s.importance else CONFIDENCE_SOURCE,
        src_vocab_size=len(translator.src_vocab),
        tgt_vocab_size=len(translator.tgt_vocab),
        max_source_tokens=translator.max_len,
        max_output_tokens=translator.max_output_len,
        max_chars=MAX_CHARS,
        max_beam=limits.max_beam,
        decoding={k: getattr(translator.defaults, k) for k in DEFAULTABLE},
        max_texts=min(limits.max_texts, s.batcher.max_pending),
        max_body_bytes=limits.max_body_bytes,
        max_response_bytes=limits.max_response_bytes,
        workers=s.pool.workers,
        data_attribution=data_credit(cfg.get("data", {}).get("path")),
    )


@router.get(
    "/api/positions", response_model=PositionMaps, response_model_exclude_none=True, responses=responses(413, 422, 431)
)
async def positions(source_len: int, target_len: int, request: Request, s: ServedDep):
    """What the position scheme adds to each head for a source of `source_len` tokens (<eos> included)
    and an output of `target_len`: ALiBi's or T5's bias, RoPE's angles, or the scheme's name only."""
    translator, limits = s.translator, s.limits
    S, T = translator.max_len or POSITION_MAX_LEN, translator.max_output_len + 1
    if not (1 <= source_len <= S and 1 <= target_len <= T):
        return error(
            422,
            f"source_len must lie in 1..{S} and target_len in 1..{T} (the longest source and output), "
            f"got {source_len} and {target_len}",
            request,
        )
    # Each number prints as "-0.0625," or so: 12 bytes counted. Built off the event loop.
    size = 12 * position_numbers(translator.model, source_len, target_len) + 1024
    if size > limits.max_response_bytes:
        return error(
            413,
            f"these position maps could take {size} bytes, over the explorer's limit of "
            f"{limits.max_response_bytes} (--max-response-bytes); ask for shorter lengths",
            request,
        )
    return await asyncio.to_thread(position_maps, translator.model, source_len, target_len)


__all__ = ["POSITION_MAX_LEN", "model_origin", "router"]
