"""The optional parts of attnlab and what each needs: a command that needs a package outside the slim core
checks for it first and, when it is missing, says in one line which extra installs it.

    require("serve", "attnlab serve")   # ValueError: attnlab serve needs fastapi, uvicorn: pip install 'attnlab[serve]'
"""

from __future__ import annotations

import importlib

# extra -> the modules it brings (the import names of the packages pyproject.toml lists under that extra)
EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "uvicorn"),
    "hf": ("transformers", "sentencepiece"),
    "ct2": ("ctranslate2",),
    "vision": ("sklearn",),
    "tensorboard": ("tensorboard",),
    "notebooks": ("jupytext", "nbformat", "nbclient"),
    "kernels": ("triton",),
}


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that cannot be imported here."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def require(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise a one-line ValueError naming `extra` unless its modules (or `modules`, a part of them) import.

    Examples:
        >>> require("serve", "attnlab serve", modules=("json",))  # present: nothing happens
    """
    missing = missing_modules(EXTRAS[extra] if modules is None else modules)
    if missing:
        raise ValueError(f"{what} needs {', '.join(missing)}: install it with pip install 'attnlab[{extra}]'")


__all__ = ["EXTRAS", "missing_modules", "require"]
