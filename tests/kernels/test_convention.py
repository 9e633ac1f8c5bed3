"""One convention for every kernel wrapper (CTranslate2's `src/ops/` shape): `kernels/<name>.py` wraps
`csrc/<name>.c` (Triton: `flash_triton.py`) with `SIGNATURES` (each C symbol's ctypes argument types; Triton:
each kernel's parameter names), `native_<op>` (the fast pass, or None/False where it does not run) and `<op>`
(what callers run: the fast pass where it runs, its PyTorch fallback elsewhere). The loader's list of kernels,
the wrappers and the package face agree, and ctypes is imported in this package only."""

from __future__ import annotations

import ast
import contextlib
import importlib
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import attnlab.kernels as face
from attnlab.kernels import loader
from attnlab.kernels.few_queries import few_queries
from attnlab.kernels.layer_norm import add_layer_norm, native_add_layer_norm

flash_wrapper = importlib.import_module("attnlab.kernels.flash")  # the module: `attnlab.kernels.flash` is the op

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
        library = loader.load(name)
        if library is None:
            pytest.skip(f"no C compiler here: {loader.status(name)}")
        module = importlib.import_module(f"attnlab.kernels.{name}")
        missing = [s for s in module.SIGNATURES if not hasattr(library, s)]
        assert not missing, f"csrc/{name}.c defines no {missing}"


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


def _masked_reference(q, k, v, lens, causal, groups):
    """softmax(q k^T / sqrt(D)) v over each query's visible keys, written out (zeros for a query that sees none)."""
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    Lq, Lk = q.shape[2], k.shape[2]
    keys = torch.arange(Lk)
    visible = torch.ones(q.shape[0], 1, Lq, Lk, dtype=torch.bool)
    if lens is not None:
        visible &= keys < lens.view(-1, 1, 1, 1)
    if causal:
        visible &= keys <= torch.arange(Lq)[:, None] + Lk - Lq
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~visible, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v


@pytest.mark.parametrize("native", [True, False])
def test_few_queries_runs_its_kernel_or_its_fallback_with_the_same_values(native):
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, 2, 8), torch.randn(3, 2, 6, 8), torch.randn(3, 2, 6, 8)
    lens = torch.tensor([6, 2, 0])  # the last row sees no key: zeros
    with torch.no_grad(), contextlib.nullcontext() if native else loader.off():
        got = few_queries(q, k, v, lens, groups=2)
    torch.testing.assert_close(got, _masked_reference(q, k, v, lens, False, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_falls_back_to_pytorch_without_triton(monkeypatch, causal):
    monkeypatch.setattr(flash_wrapper, "available", lambda: False)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    lens = torch.tensor([5, 0])
    assert flash_wrapper.native_flash(q, k, v, lens, causal) is None
    got = flash_wrapper.flash(q, k, v, lens, causal)
    torch.testing.assert_close(got, _masked_reference(q, k, v, lens, causal, 2), atol=1e-5, rtol=1e-5)


def test_add_layer_norm_falls_back_to_pytorch():
    ln, x, y = torch.nn.LayerNorm(6), torch.randn(4, 6), torch.randn(4, 6)
    with loader.off(), torch.no_grad():
        assert native_add_layer_norm(x, y, ln) is None
        torch.testing.assert_close(add_layer_norm(x, y, ln), F.layer_norm(x + y, (6,), ln.weight, ln.bias, ln.eps))
