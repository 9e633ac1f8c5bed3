"""attnlab's C kernels are built once per source, compiler and CPU, kept under ATTNLAB_CACHE, and give way
to PyTorch's operators when there is no compiler, a build fails or ATTNLAB_NATIVE=0."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from attnlab.kernels import loader as native
from attnlab.kernels.few_queries import ARGS as _FEW_QUERIES_ARGS
from attnlab.kernels.int8_rows import QUANTIZE_ARGS as _QUANTIZE_ARGS


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A private kernel cache, and nothing loaded yet (restored to the suite's state after)."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    native.reset()
    yield tmp_path
    native.reset()


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
    fn = native.function("int8_rows", "attnlab_quantize_rows_f32", _QUANTIZE_ARGS)
    assert fn is native.function("int8_rows", "attnlab_quantize_rows_f32", _QUANTIZE_ARGS)


@pytest.mark.usefixtures("c_kernels")
def test_off_by_environment_and_in_a_block(fresh, monkeypatch):
    with native.off():
        assert native.function("few_queries", "attnlab_few_queries_f32", _FEW_QUERIES_ARGS) is None
    assert native.function("few_queries", "attnlab_few_queries_f32", _FEW_QUERIES_ARGS) is not None
    native.reset()
    monkeypatch.setenv("ATTNLAB_NATIVE", "0")
    assert native.load("int8_rows") is None
    assert native.status("int8_rows") == "off (ATTNLAB_NATIVE=0)"
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
    from attnlab.kernels.few_queries import native_few_queries

    q = torch.randn(2, 2, 1, 16)
    assert native_few_queries(q, q, q) is None


def test_no_compiler(fresh, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(fresh))  # no cc, gcc or clang on it
    assert native.load("int8_rows") is None
    assert native.status("int8_rows").startswith("no C compiler found")
    # int8 then runs fbgemm's dynamic Linear (where this build has it), faster than the per-row kernel on
    # PyTorch's operators; ATTNLAB_NATIVE=0 keeps the per-row values
    from attnlab.models import Transformer, TransformerConfig
    from attnlab.utils.precision import prepare_for_inference
    from attnlab.utils.quantize import Int8Linear

    cfg = TransformerConfig(20, 20, num_hiddens=16, num_heads=2, num_layers=1, ffn_num_hiddens=32, dropout=0.0)
    model = Transformer(cfg).eval()
    fbgemm = any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm"))
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
