"""attnlab's C kernels are built once per source, compiler and CPU, kept under ATTNLAB_CACHE and checked
against their digest before loading, and give way to PyTorch's operators when there is no compiler, a build
fails, a cached library is damaged or ATTNLAB_NATIVE is off. Every test here uses a cache of its own."""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.kernels import loader as native
from attnlab.kernels import switches
from attnlab.kernels.few_queries import SIGNATURES as _FEW_QUERIES
from attnlab.kernels.few_queries import native_few_queries
from attnlab.kernels.int8_rows import SIGNATURES as _ROWS
from attnlab.kernels.layer_norm import native_add_layer_norm
from attnlab.models.transformer_layers import AddNorm

_F32 = _FEW_QUERIES["attnlab_few_queries_f32"]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A private kernel cache, and nothing loaded yet (restored to the suite's state after)."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ATTNLAB_NATIVE", raising=False)
    native.reset()
    yield tmp_path
    native.reset()


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _built(cache) -> list:
    return sorted((cache / "native").glob("*.so")) if (cache / "native").exists() else []


@pytest.mark.usefixtures("c_kernels")
def test_built_once_and_reused_from_the_cache(fresh):
    lib = native.load("few_queries")
    assert lib is not None, native.status("few_queries")  # CI installs gcc (.ci/run)
    assert native.status("few_queries").startswith("built with")
    (so,) = _built(fresh / "cache")
    assert so.name.startswith("few_queries-")
    mtime = so.stat().st_mtime_ns
    native.reset()
    assert native.load("few_queries") is not None
    assert _built(fresh / "cache") == [so] and so.stat().st_mtime_ns == mtime  # not rebuilt
    # a function comes with its signature, looked up once
    fn = native.function("int8_rows", "attnlab_quantize_rows_f32", _ROWS["attnlab_quantize_rows_f32"])
    assert fn is not None, native.status("int8_rows")
    assert fn.argtypes == _ROWS["attnlab_quantize_rows_f32"]
    assert fn is native.function("int8_rows", "attnlab_quantize_rows_f32", _ROWS["attnlab_quantize_rows_f32"])


@pytest.mark.usefixtures("c_kernels")
def test_off_by_environment_and_in_a_block(fresh, monkeypatch):
    with native.off():
        assert (
            native.function("few_queries", "attnlab_few_queries_f32", _FEW_QUERIES["attnlab_few_queries_f32"]) is None
        )
    assert (
        native.function("few_queries", "attnlab_few_queries_f32", _FEW_QUERIES["attnlab_few_queries_f32"]) is not None
    )
    native.reset()
    monkeypatch.setenv("ATTNLAB_NATIVE", "0")
    assert native.load("int8_rows") is None
    assert native.status("int8_rows") == "off (ATTNLAB_NATIVE=0)"
    assert native.switched_off() and not native.active()
    assert not any(p.name.startswith("int8_rows") for p in _built(fresh / "cache"))  # nothing built


def test_a_failed_build_falls_back_and_leaves_no_library(fresh, monkeypatch, caplog):
    # A "compiler" that writes half a file and fails, as an interrupted or broken build would.
    cc = fresh / "badcc"
    cc.write_text('#!/bin/sh\nfor a; do case "$prev" in -o) echo junk > "$a";; esac; prev="$a"; done\n'
                  'echo "error: no such instruction" >&2\nexit 1\n')  # fmt: skip
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(cc))
    with caplog.at_level("WARNING", logger="attnlab.kernels.loader"):
        assert native.load("few_queries") is None
        assert native.load("layer_norm") is None
    assert "building few_queries.c failed (error: no such instruction)" in native.status("few_queries")
    assert len(caplog.records) == 1, caplog.text  # one line for the process, not one per kernel
    assert _built(fresh / "cache") == [] and os.listdir(fresh / "cache" / "native") == []
    # the callers take PyTorch's path

    q = torch.randn(2, 2, 1, 16)
    assert native_few_queries(q, q, q) is None


def test_no_compiler(fresh, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("ATTNLAB_INT8_KERNEL")  # the suite names the per-row kernel (tests/conftest.py)
    monkeypatch.setattr("attnlab.inference.precision.cpu_features", lambda: {"avx2", "avx512_vnni"})
    monkeypatch.setenv("PATH", str(fresh))  # no cc, gcc or clang on it
    assert native.load("int8_rows") is None
    assert native.status("int8_rows").startswith("no C compiler found")
    # int8 then runs fbgemm's dynamic Linear (where this build has it), faster than the per-row kernel on
    # PyTorch's operators; ATTNLAB_NATIVE=0 keeps the per-row values
    from attnlab.inference.precision import prepare_for_inference
    from attnlab.inference.quantize import Int8Linear, has_fbgemm
    from attnlab.models import Transformer, TransformerConfig

    cfg = TransformerConfig(20, 20, num_hiddens=16, num_heads=2, num_layers=1, ffn_num_hiddens=32, dropout=0.0)
    model = Transformer(cfg).eval()
    fbgemm = has_fbgemm()
    fast = prepare_for_inference(model, "int8")
    dense = fast.decoder.dense
    assert ("quantized" in type(dense).__module__) if fbgemm else isinstance(dense, Int8Linear)
    monkeypatch.setenv("ATTNLAB_NATIVE", "0")
    native.reset()
    assert isinstance(prepare_for_inference(model, "int8").decoder.dense, Int8Linear)


def test_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    assert native.cache_dir() == tmp_path / "native"
    monkeypatch.delenv("ATTNLAB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_dir() == tmp_path / "xdg" / "attnlab" / "native"


def _layer_norm_is_right() -> bool:
    """One call of the LayerNorm kernel against PyTorch's (False where the C pass did not run)."""
    ln, x, y = torch.nn.LayerNorm(40), torch.randn(3, 40), torch.randn(3, 40)
    with torch.no_grad():
        got = native_add_layer_norm(x, y, ln)
        return got is not None and torch.allclose(got, ln(x + y), atol=1e-5)


@pytest.mark.usefixtures("c_kernels")
def test_a_library_cut_short_in_the_cache_is_built_again(fresh, monkeypatch, caplog):
    # A partial copy or restore of the cache: the library's first half, its digest whole.
    assert native.load("layer_norm") is not None, native.status("layer_norm")
    (good,) = _built(fresh / "cache")
    damaged = fresh / "restored" / "native" / good.name
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    shutil.copy(f"{good}.sha256", f"{damaged}.sha256")
    monkeypatch.setenv("ATTNLAB_CACHE", str(fresh / "restored"))
    native.reset()
    with caplog.at_level(logging.WARNING):
        assert _layer_norm_is_right()  # rebuilt, not loaded as it lay (which dies on first use: SIGBUS)
    assert damaged.read_bytes() == good.read_bytes() and not caplog.records, caplog.text


@pytest.mark.usefixtures("c_kernels")
def test_a_library_without_its_digest_is_built_again(fresh):
    target = native.cached_library("layer_norm")
    assert target is not None
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\x7fELF not a library")  # a file of another version of attnlab, or junk
    assert native.load("layer_norm") is not None, native.status("layer_norm")
    assert Path(f"{target}.sha256").read_text().strip() == sha256(target)


@pytest.mark.usefixtures("c_kernels")
def test_a_cached_library_without_the_function_falls_back_with_one_warning(fresh, caplog):
    # A library whose digest holds but which lacks the symbol its wrapper asks for.
    target = native.cached_library("layer_norm")
    assert target is not None
    target.parent.mkdir(parents=True)
    other = fresh / "other.c"
    other.write_text("int attnlab_something_else(void) { return 0; }\n")
    cc = shlex.split(os.environ.get("CC") or "cc")
    subprocess.run([*cc, "-shared", "-fPIC", "-o", str(target), str(other)], check=True, timeout=120)
    (fresh / "cache" / "native" / f"{target.name}.sha256").write_text(sha256(target) + "\n")
    ln, x = torch.nn.LayerNorm(8), torch.randn(3, 8)
    with caplog.at_level(logging.WARNING), torch.no_grad():
        assert native_add_layer_norm(x, x, ln) is None  # the caller's PyTorch path runs
        assert native_add_layer_norm(x, x, ln) is None
        torch.testing.assert_close(AddNorm(8).eval()(x, x), ln(x + x))
    assert len(caplog.records) == 1, caplog.text
    assert "lacks attnlab_add_layer_norm_f32" in caplog.records[0].getMessage()
    assert native.load("layer_norm") is None and native.function("layer_norm", "attnlab_something_else", []) is None
    assert not target.exists()  # dropped from the cache: the next run builds it again
    check = (  # the next run: built again, the C pass gives LayerNorm's values
        "import torch; from attnlab.kernels.layer_norm import native_add_layer_norm; "
        "ln, x = torch.nn.LayerNorm(8), torch.randn(3, 8); "
        "out = native_add_layer_norm(x, x, ln.requires_grad_(False)); "
        "assert out is not None and torch.allclose(out, ln(x + x), atol=1e-5)"
    )
    subprocess.run([sys.executable, "-c", check], check=True, timeout=120)
    assert sha256(target) == Path(f"{target}.sha256").read_text().strip()


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "Off", " off "])
def test_native_off_by_any_false_spelling(fresh, monkeypatch, value):
    monkeypatch.setenv("ATTNLAB_NATIVE", value)
    assert native.switched_off() and not native.active()
    assert native.load("layer_norm") is None and native.status("layer_norm").startswith("off (ATTNLAB_NATIVE=")
    x = torch.randn(3, 8)
    assert native_add_layer_norm(x, x, torch.nn.LayerNorm(8)) is None
    assert _built(fresh / "cache") == []  # nothing built


@pytest.mark.parametrize("value", ["1", "true", "Yes", "ON", ""])
def test_native_on_by_any_true_spelling(fresh, monkeypatch, value, caplog):
    monkeypatch.setenv("ATTNLAB_NATIVE", value)
    with caplog.at_level(logging.WARNING):
        assert not native.switched_off()
    assert not caplog.records


def test_a_native_setting_that_is_no_boolean_is_one_warning(fresh, monkeypatch, caplog):
    monkeypatch.setenv("ATTNLAB_NATIVE", "sometimes")
    with caplog.at_level(logging.WARNING):
        assert not native.switched_off() and not native.switched_off()
    assert len(caplog.records) == 1, caplog.text
    message = caplog.records[0].getMessage()
    assert "ATTNLAB_NATIVE='sometimes' is not a boolean" in message and "0/1" in message and "off/on" in message


def test_a_compiler_that_cannot_run_says_so_once(fresh, monkeypatch, caplog):
    monkeypatch.setenv("CC", str(fresh / "nonexistent-cc"))
    with caplog.at_level(logging.WARNING):
        assert native.load("few_queries") is None
        assert native.load("argmax") is None
    assert "did not run" in native.status("argmax")
    assert len(caplog.records) == 1 and "nonexistent-cc" in caplog.records[0].getMessage(), caplog.text


def test_the_fingerprint_follows_every_switch_and_the_environment(monkeypatch):
    monkeypatch.delenv("ATTNLAB_NATIVE", raising=False)
    before = switches.fingerprint()
    fast = switches.Switch("a test's path")
    assert switches.fingerprint() == (*before, ("a test's path", True))
    with fast.off():
        assert switches.fingerprint() == (*before, ("a test's path", False))
    with native.off():
        assert switches.fingerprint() != (*before, ("a test's path", True))
    monkeypatch.setenv("ATTNLAB_NATIVE", "off")
    assert switches.fingerprint()[0] is False
