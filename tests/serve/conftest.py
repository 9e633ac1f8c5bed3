"""Shared fixtures: one tiny Transformer trained for 20 steps on the shipped sample pairs (seconds),
and a real `attnlab serve` process on a free loopback port for the HTTP and browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def train_tiny(run_dir: Path, steps: int = 20) -> Path:
    """A 2-layer, 2-head Transformer on attnlab's bundled sample data; enough steps to emit words."""
    from attnlab.data import sample_data_path
    from attnlab.presets import get_preset
    from attnlab.train import TrainConfig, train_run

    preset = get_preset("transformer", "tiny")
    cfg = TrainConfig.from_dict(
        {**preset["train"], "max_steps": steps, "epochs": 100, "schedule": "constant", "lr": 1e-2, "eval_limit": 4}
    )
    train_run(
        "transformer",
        {**preset["model"], "num_layers": 2},
        cfg,
        {**preset["data"], "path": str(sample_data_path())},
        run_dir,
        progress=False,
    )
    return run_dir


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("serve") / "tiny")


@pytest.fixture(scope="session")
def translator(tiny_run):
    from attnlab.checkpoint import load_translator

    return load_translator(tiny_run)


@pytest.fixture(scope="session")
def client(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve import create_app

    with TestClient(create_app(translator, workers=2)) as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint, workers: int = 2, timeout: float = 120.0):
    """`python -m attnlab serve` on a free port; returns (process, base URL) once /healthz answers."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnlab",
            "serve",
            "--checkpoint",
            str(checkpoint),
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"attnlab serve exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"attnlab serve did not answer on {url} within {timeout} s:\n{proc.stdout.read()}")


def stop_server(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def server(tiny_run):
    proc, url = start_server(tiny_run)
    yield url
    stop_server(proc)
