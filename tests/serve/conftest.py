"""Shared fixtures: one tiny Transformer trained for 20 steps on the shipped sample pairs (seconds),
and a real `attnlab serve` process on a free loopback port for the HTTP and browser tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab.testing import start_server, stop_server, train_tiny


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("serve") / "tiny")


@pytest.fixture(scope="module", autouse=True)
def _one_decode_thread(one_thread):
    """The in-process apps decode with one torch thread, as `attnlab serve` does on two cores
    (`serve.listen.decode_threads`); more threads per decode thread only fight over the cores."""


@pytest.fixture(scope="session")
def translator(tiny_run):
    from attnlab.runs.loading import load_translator

    return load_translator(tiny_run)


@pytest.fixture(scope="session")
def client(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    with TestClient(create_app(translator, workers=2)) as c:
        yield c


@pytest.fixture(scope="session")
def server(tiny_run):
    # fp32: the tests compare the page with in-process fp32 translations; `auto` picks bf16 on CPUs with it.
    proc, port = start_server(tiny_run, "--workers", "2", "--precision", "fp32", capture=True)
    yield f"http://127.0.0.1:{port}"
    stop_server(proc, timeout=15)
