"""The attention explorer and translation server: `create_app` (FastAPI; app.py), its bounds (guard.py),
the explorer's per-request pool (pool.py), the micro-batcher of POST /api/translations (batcher.py),
and the static page in `static/`. Start it with `attnlab serve`.

Names are imported on first use, so `attnlab --help` (which reads guard.Limits' defaults for the
serve flags) does not load FastAPI and torch.
"""

from importlib import import_module

_WHERE = {
    "ATTRIBUTION": ".app",
    "create_app": ".app",
    "MicroBatcher": ".batcher",
    "Limits": ".guard",
    "Explanation": "attnlab.explain",
    "InputError": "attnlab.explain",
    "TextTooLong": "attnlab.explain",
    "explain": "attnlab.explain",
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'attnlab.serve' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name], __name__), name)


__all__ = ["ATTRIBUTION", "Explanation", "InputError", "Limits", "MicroBatcher", "TextTooLong", "create_app", "explain"]
