"""The layers the kernels sit in: `attnlab.kernels` imports nothing else of attnlab (every package above may
run a C pass), `attnlab.inference` nothing but the kernels (attention, data, models and decoding all stand on
it), and `attnlab.decoding` reaches the fast paths through `attnlab.kernels`, not `attnlab.models`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "attnlab"


def imported(package: str) -> dict[str, set[str]]:
    """Module file -> the attnlab modules it imports (absolute, relative ones resolved)."""
    out: dict[str, set[str]] = {}
    for path in sorted((SRC / package).glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = f"attnlab.{package}" if node.level else ""
                names.add(f"{base}.{node.module}" if base and node.module else base or node.module or "")
        out[path.name] = {n for n in names if n.startswith("attnlab")}
    return out


def test_kernels_import_nothing_else_of_attnlab():
    outside = {
        f: sorted(n for n in names if not n.startswith("attnlab.kernels")) for f, names in imported("kernels").items()
    }
    assert not any(outside.values()), outside


@pytest.mark.parametrize("package", ["decoding", "attention"])
def test_decoding_and_attention_do_not_import_models(package):
    models = {f: sorted(n for n in names if n.startswith("attnlab.models")) for f, names in imported(package).items()}
    assert not any(models.values()), models


def test_inference_imports_only_the_kernels():
    outside = {
        f: sorted(n for n in names if not n.startswith(("attnlab.kernels", "attnlab.inference")))
        for f, names in imported("inference").items()
    }
    assert not any(outside.values()), outside


def test_every_c_file_has_its_wrapper():
    wrappers = {p.stem for p in (SRC / "kernels").glob("*.py")}
    c_files = {p.stem for p in (SRC / "csrc").glob("*.c")}
    assert c_files <= wrappers, c_files - wrappers
