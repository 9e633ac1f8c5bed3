"""`attnlab.kernels.libc.keep_freed_memory`: glibc keeps freed blocks for the next allocation (no fresh pages for
each), and every CPU decode asks for it."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
import textwrap

import pytest
import torch

import attnlab.decoding.batches as batches
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.translator import Translator
from tests.decoding.test_translator import tiny

GLIBC = sys.platform == "linux" and "libc.so" in (ctypes.util.find_library("c") or "")

# Blocks of 1..24 MiB, each written whole and freed: by default glibc maps each one afresh (its dynamic threshold
# trails the sizes), so every page of every block is a page fault.
GROWING_BLOCKS = textwrap.dedent("""
    import resource, sys, torch
    from attnlab.kernels.libc import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for mib in range(1, 25):
        block = torch.empty(mib << 18, dtype=torch.float32).fill_(1.0)
        del block
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", GROWING_BLOCKS, mode], capture_output=True, text=True, check=True, timeout=120
    )
    return int(out.stdout)


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_freed_blocks_are_reused_not_faulted_in_again():
    default, kept = _faults("default"), _faults("keep")
    pages = sum(range(1, 25)) << 8  # every 4 KiB page of every block
    assert default > 0.8 * pages  # the default maps (and faults in) each block anew
    assert kept < 0.35 * default, (kept, default)  # kept: the heap grows to the largest block, once


def test_a_cpu_decode_keeps_freed_memory(monkeypatch):
    asked = []
    monkeypatch.setattr(batches, "keep_freed_memory", lambda: asked.append(True))
    translator = Translator(*tiny())
    translator.translate(["go ."], options=DecodeOptions(beam=1))
    assert asked and torch.device(translator.device).type == "cpu"
