"""One cost estimate for every route, made before any work: the requests that held a worker for
seconds or tried to allocate gigabytes get 413 naming the option to lower, without reaching a decode
thread; plain requests at the server's largest sizes still pass."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from attnlab.serve.app import create_app
from attnlab.serve.guard import Limits

HOSTILE = {
    "texts": ["i'm home ."] * 50,
    "beam": 8,
    "options": {"n_best": 8, "min_len": 1023, "max_len": 1024, "align": True},
}


@pytest.fixture
def untouched(translator, monkeypatch):
    """A client whose decode paths fail the test if anything reaches them."""

    def never(*args, **kwargs):
        raise AssertionError("a refused request reached decoding")

    with TestClient(create_app(translator)) as c:
        monkeypatch.setattr(c.app.state.served.batcher, "translate", never)
        monkeypatch.setattr(c.app.state.served.pool, "run", never)
        yield c


def test_the_two_kilobyte_body_is_refused_before_any_work(untouched):
    r = untouched.post("/api/translations", json=HOSTILE)
    assert r.status_code == 413, r.text
    detail = r.json()["detail"]
    assert "memory" in detail and "--max-request-mb" in detail and "lower max_len (1024) first" in detail
    assert r.json()["request_id"]


def test_a_thousand_constraints_are_refused(untouched, translator):
    word = next(w for w in translator.tgt_vocab.idx_to_token if w.isalpha())
    body = {"texts": ["i'm home ."], "options": {"constraints": [word] * 1000, "max_len": 1024}}
    r = untouched.post("/api/translations", json=body)
    assert r.status_code == 413, r.text
    assert "--max-request-work" in r.json()["detail"] and "constraints (1000)" in r.json()["detail"]


def test_the_explorer_shares_the_estimate(translator, monkeypatch):
    with TestClient(create_app(translator, limits=Limits(max_request_work=0.01))) as c:
        monkeypatch.setattr(c.app.state.served.pool, "run", lambda *a: pytest.fail("reached decoding"))
        body = {"text": "i'm home .", "beam": 8, "options": {"min_len": 299, "max_len": 300}}
        r = c.post("/api/explain", json=body)
        assert r.status_code == 413, r.text
        assert "--max-request-work" in r.json()["detail"] and "max_len (300)" in r.json()["detail"]


def test_plain_requests_at_the_largest_sizes_pass(client):
    r = client.post("/api/translations", json={"texts": ["we are friends and he is calm ."] * 64, "beam": 8})
    assert r.status_code == 200, r.text
    r = client.post("/api/explain", json={"text": "i'm home .", "beam": 8, "options": {"n_best": 8, "align": True}})
    assert r.status_code == 200, r.text


def test_a_request_over_a_lowered_memory_budget_names_the_flag(translator):
    with TestClient(create_app(translator, limits=Limits(max_request_mb=1))) as c:
        body = {"texts": ["i'm home ."] * 8, "beam": 8, "options": {"n_best": 8, "align": True, "max_len": 200}}
        r = c.post("/api/translations", json=body)
        assert r.status_code == 413 and "(--max-request-mb)" in r.json()["detail"]


def test_an_idle_server_collects_before_it_trims(monkeypatch):
    from attnlab.serve import memory

    collected: list[int] = []

    def collect() -> int:
        collected.append(1)
        return 0

    monkeypatch.setattr(memory.gc, "collect", collect)
    trim = memory.IdleTrim(lambda: False, min_interval_s=0.0)
    assert trim.idle() and collected == [1]
