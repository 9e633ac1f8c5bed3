"""tools/pick_torch.py, the Makefile's choice of PyTorch: the CPU index when it answers (a local HTTP server plays
it), pip's own configuration when it does not (a refused port, a server that never replies), within its probe's
seconds; `make` passes the choice to pip, and `TORCH=` still overrides it."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import pick_torch  # noqa: E402

PIN = "torch==2.13.0"


@pytest.fixture
def cpu_index(tmp_path):
    """A local index with a torch/ page, as PyTorch's CPU index has; yields its URL."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<a>torch-2.13.0+cpu.whl</a>", encoding="utf-8")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(tmp_path), **k)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/whl/cpu"  # nothing listens once it is closed


def test_the_cpu_index_is_taken_when_it_answers(cpu_index):
    args, why = pick_torch.pip_args(PIN, cpu_index)
    assert args == [PIN, "--index-url", cpu_index] and "the CPU build" in why


def test_an_unreachable_index_falls_back_to_pip_configuration_at_once():
    start = time.monotonic()
    args, why = pick_torch.pip_args(PIN, _closed_port())
    assert args == [PIN] and "did not answer" in why and "TORCH=" in why
    assert time.monotonic() - start < 2.0


def test_an_index_that_never_replies_costs_the_probe_seconds_only():
    with socket.socket() as s:  # accepts connections (the kernel's backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        start = time.monotonic()
        args, _ = pick_torch.pip_args(PIN, f"http://127.0.0.1:{s.getsockname()[1]}/whl/cpu", timeout=0.5)
        assert args == [PIN] and time.monotonic() - start < 2.0


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_installs_what_the_probe_picked_and_torch_overrides_it(tmp_path, cpu_index):
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "tools" / "pick_torch.py", tmp_path / "tools" / "pick_torch.py")
    env = {k: v for k, v in os.environ.items() if k != "TORCH"}
    show = ["make", "-s", "--no-print-directory", f"PY={sys.executable}", "--eval", "show: ; @echo [$(TORCH_ARGS)]"]

    def make(*args: str) -> str:
        res = subprocess.run([*show, *args, "show"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=30)
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    assert make(f"TORCH_INDEX={cpu_index}") == f"[{PIN} --index-url {cpu_index}]"
    assert make(f"TORCH_INDEX={_closed_port()}") == f"[{PIN}]"
    assert make("TORCH=torch==2.13.0+cu130", f"TORCH_INDEX={cpu_index}") == "[torch==2.13.0+cu130]"
