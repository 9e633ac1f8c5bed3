"""attnlab.utils.runtime's `memory_bytes`: the memory a process may use is the smallest of the physical memory,
a cgroup's limit and the address-space limit (`ulimit -v`)."""

from __future__ import annotations

import subprocess
import sys

import attnlab.utils.runtime as runtime


def test_memory_bytes_reads_the_address_space_limit():
    """Under an address-space limit below the machine's memory, the memory a process may use is that limit."""
    # The limit is set once the module (and torch) is loaded, 1 GiB above what the process already maps: what is
    # tested is the reading of the limit, not whether torch loads under it.
    code = (
        "import importlib.util as u, resource; "
        f"s = u.spec_from_file_location('m', {runtime.__file__!r}); m = u.module_from_spec(s); "
        "s.loader.exec_module(m); "
        "mapped = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024; "
        "limit = mapped + (1 << 30); resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
        "print(limit, m.memory_bytes())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    limit, got = map(int, out.split())
    assert got == limit < runtime.memory_bytes()


def test_memory_bytes_reads_a_cgroup_limit(tmp_path, monkeypatch):
    unlimited, limited = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    unlimited.write_text("max\n")
    limited.write_text(f"{1 << 20}\n")
    monkeypatch.setattr(runtime, "_CGROUP_LIMITS", (str(unlimited), str(tmp_path / "absent")))
    free = runtime.memory_bytes()
    assert free is not None and free > 1 << 20  # "max" and a missing file limit nothing
    monkeypatch.setattr(runtime, "_CGROUP_LIMITS", (str(unlimited), str(limited)))
    assert runtime.memory_bytes() == 1 << 20
