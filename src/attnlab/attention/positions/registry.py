"""The position schemes by name: what stacks, exporters and views look a scheme up in.

get_scheme("rope").enters          # 'queries and keys'
register(MyScheme())               # a new scheme, for every stack, exporter and view at once
"""

from __future__ import annotations

from attnlab.attention.positions.alibi import ALIBI
from attnlab.attention.positions.base import PositionScheme
from attnlab.attention.positions.learned import LEARNED
from attnlab.attention.positions.none import NONE
from attnlab.attention.positions.rope import ROPE
from attnlab.attention.positions.sinusoidal import SINUSOIDAL
from attnlab.attention.positions.t5 import T5_BIAS

SCHEMES: dict[str, PositionScheme] = {s.name: s for s in (SINUSOIDAL, LEARNED, ROPE, ALIBI, T5_BIAS, NONE)}
POSITIONS = tuple(SCHEMES)  # the schemes attnlab comes with, in the order docs list them


def register(scheme: PositionScheme) -> PositionScheme:
    """Add `scheme` under its name (ValueError when the name is taken or empty); returns it."""
    if not isinstance(scheme, PositionScheme) or not scheme.name:
        raise ValueError(f"register expects a PositionScheme with a name, got {scheme!r}")
    if scheme.name in SCHEMES:
        raise ValueError(f"a position scheme named {scheme.name!r} exists already; pick another name")
    SCHEMES[scheme.name] = scheme
    return scheme


def unregister(name: str) -> None:
    """Remove the scheme `name` (one `register` added; the built-in ones stay)."""
    if name in POSITIONS:
        raise ValueError(f"{name!r} is one of attnlab's own position schemes {POSITIONS}; it stays")
    SCHEMES.pop(name, None)


def get_scheme(name: str) -> PositionScheme:
    """The scheme called `name`; ValueError (one line) naming the schemes there are."""
    scheme = SCHEMES.get(name) if isinstance(name, str) else None
    if scheme is None:
        raise ValueError(f"TransformerConfig.positions must be one of {tuple(SCHEMES)}, got {name!r}")
    return scheme
