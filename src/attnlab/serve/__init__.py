"""The attention explorer: `explain` (a translation with every attention map), `create_app` (FastAPI),
and the static page in `static/`. Start it with `attnlab serve`."""

from .app import ATTRIBUTION, create_app
from attnlab.explain import Explanation, InputError, TextTooLong, explain

__all__ = ["ATTRIBUTION", "Explanation", "InputError", "TextTooLong", "create_app", "explain"]
