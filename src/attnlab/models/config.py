"""What every model config shares: JSON round trip that rejects keys it does not know."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, fields
from typing import Any, ClassVar


class ConfigMixin:
    """Mixed into the model config dataclasses (`TransformerConfig`, `BahdanauConfig`)."""

    MODEL_TYPE: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        """Build a config from a JSON dict; unknown or missing keys raise ValueError naming them."""
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__}.from_dict expects a dict, got {type(d).__name__}")
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys {unknown}; valid keys are {names}")
        missing = [f.name for f in fields(cls)  # type: ignore[arg-type]
                   if f.default is MISSING and f.default_factory is MISSING and f.name not in d]
        if missing:
            raise ValueError(f"{cls.__name__} needs the keys {missing}, which the dict lacks")
        from attnlab.config_types import check_field_types

        check_field_types(cls, d)  # "dropout": "x" in a config.json: one line naming the field
        return cls(**d)
