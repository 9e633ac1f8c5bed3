"""One convention for every kernel wrapper (CTranslate2's `src/ops/` shape): `kernels/<name>.py` wraps
`csrc/<name>.c` (Triton: `flash_triton.py`) with `SIGNATURES` (each C symbol's ctypes argument types; Triton:
each kernel's parameter names), `native_<op>` (the fast pass, or None/False where it does not run) and `<op>`
(what callers run: the fast pass where it runs, its PyTorch fallback elsewhere). The loader's list of kernels,
the wrappers and the package face agree, and ctypes is imported in this package only."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import attnlab.kernels as face
from attnlab.kernels import loader

SRC = Path(__file__).resolve().parents[2] / "src" / "attnlab"
# The one op whose fallback is not a function: int8's fused step, run by `attnlab.inference.int8_step`
# over the model's layers, whose fallback is the modules themselves.
OPS = {"int8_step": None, "flash": "flash"}
INFRASTRUCTURE = {"__init__", "loader", "switches", "libc", "flash_triton"}


def wrappers() -> list[str]:
    return sorted(p.stem for p in (SRC / "kernels").glob("*.py") if p.stem not in INFRASTRUCTURE)


def op_of(module) -> str | None:
    """The `<op>` a wrapper pairs with its `native_<op>` (exactly one `native_` name in its __all__)."""
    natives = [n for n in module.__all__ if n.startswith("native_")]
    assert len(natives) == 1, f"{module.__name__}: one native_<op> expected, got {natives}"
    return natives[0].removeprefix("native_")


def test_every_c_file_and_the_triton_kernel_has_a_wrapper_and_nothing_else_does():
    assert set(wrappers()) == set(loader.KERNELS) | {"flash"}


def test_every_wrapper_has_signatures_native_op_and_op():
    for name in wrappers():
        module = importlib.import_module(f"attnlab.kernels.{name}")
        assert isinstance(module.SIGNATURES, dict) and module.SIGNATURES, name
        op = op_of(module)
        assert callable(getattr(module, f"native_{op}")), name
        if OPS.get(name, op) is not None:
            assert op in module.__all__ and callable(getattr(module, op)), f"{name}: no {op} with its fallback"


def test_the_c_signatures_name_symbols_of_their_own_file():
    for name in loader.KERNELS:
        module = importlib.import_module(f"attnlab.kernels.{name}")
        text = (SRC / "csrc" / f"{name}.c").read_text()
        missing = [s for s in module.SIGNATURES if f"{s}(" not in text]
        assert not missing, f"{name}.c defines no {missing}"


def test_the_face_lists_every_wrapper_op():
    for name in wrappers():
        op = op_of(importlib.import_module(f"attnlab.kernels.{name}"))
        assert f"native_{op}" in face.__all__, f"attnlab.kernels does not export native_{op}"
        if OPS.get(name, op) is not None:
            assert op in face.__all__, f"attnlab.kernels does not export {op}"
        assert f"{name} " in face.__doc__, f"attnlab.kernels' docstring does not list {name}"


def test_ctypes_is_imported_in_kernels_only():
    users = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(n == "ctypes" or n.startswith("ctypes.") for n in names):
                users.append(str(path.relative_to(SRC)))
    assert users and all(u.startswith("kernels/") for u in users), sorted(set(users))
