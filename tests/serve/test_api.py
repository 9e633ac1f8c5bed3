"""The JSON API through FastAPI's in-process client: shapes, normalisation, every bad input -> 4xx."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from attnlab.decoding.options import MAX_BEAM


def _shape(x):
    """Shape of a nested list, checking it is rectangular."""
    if not isinstance(x, list):
        return ()
    inner = {_shape(e) for e in x}
    assert len(inner) <= 1, "ragged nested list"
    return (len(x), *(inner.pop() if inner else ()))


@pytest.mark.parametrize("beam", [1, 4])
def test_translate_shapes_and_rows(client, translator, beam):
    r = client.post("/api/explain", json={"text": "i'm home .", "beam": beam})
    assert r.status_code == 200, r.text
    d = r.json()
    N, H = translator.config["model"]["num_layers"], translator.config["model"]["num_heads"]
    Ls, Lt = len(d["src_tokens"]), len(d["tgt_tokens"])
    A = d["attention"]
    assert _shape(A["encoder_self"]) == (N, H, Ls, Ls)
    assert _shape(A["decoder_self"]) == (N, H, Lt, Lt)
    assert _shape(A["cross"]) == (N, H, Lt, Ls)
    assert d["src_tokens"][-1] == "<eos>" and d["tgt_input_tokens"][0] == "<bos>"
    assert d["translation"] == translator.translate(["i'm home ."], options=translator.options(beam=beam))[0]
    for kind in A.values():
        for layer in kind:
            for head in layer:
                for row in head:
                    assert abs(sum(row) - 1) < 1e-3 and min(row) >= 0
    for layer in A["decoder_self"]:  # causal: nothing above the diagonal
        for head in layer:
            assert all(w == 0 for q, row in enumerate(head) for w in row[q + 1 :])


def test_unknown_word_shown_as_unk(client):
    d = client.post("/api/explain", json={"text": "qwzx is here ."}).json()
    assert d["src_tokens"][0] == "<unk>"


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"text": ""}, 422, "empty"),
        ({"text": "   \t "}, 422, "empty"),
        ({"text": "a" * 501}, 413, "500"),
        ({"text": "go " * 40}, 422, "tokens"),
        ({"text": 42}, 422, "text"),
        ({"text": ["go ."]}, 422, "text"),
        ({"text": "go .", "beam": 0}, 422, "beam"),
        ({"text": "go .", "beam": 9}, 422, "beam"),
        ({"text": "go .", "beam": "2"}, 422, "beam"),
        ({"text": "go .", "beam": 1.5}, 422, "beam"),
        ({"beam": 1}, 422, "text"),
        ({"text": "go .", "extra": 1}, 422, "extra"),
        (["go ."], 422, ""),
    ],
)
def test_bad_input_is_4xx_with_message(client, body, status, words):
    r = client.post("/api/explain", json=body)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and words.lower() in detail.lower()


def test_malformed_json(client):
    r = client.post("/api/explain", content=b'{"text": "go .",', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]


def test_unexpected_error_is_generic_500_with_request_id(translator, caplog):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    broken = copy.copy(translator)
    broken.search = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("decoder exploded at /secret/path"))
    with TestClient(create_app(broken), raise_server_exceptions=False) as c:
        r = c.post("/api/explain", json={"text": "go .", "beam": 1})
    assert r.status_code == 500
    body = r.json()
    assert "exploded" not in r.text and "/secret" not in r.text and "RuntimeError" not in r.text
    rid = body["request_id"]
    assert rid and rid == r.headers["x-request-id"] and rid in body["detail"]
    # The traceback stays in the server's log, findable by the id.
    assert any(body["request_id"] in rec.getMessage() and rec.exc_info for rec in caplog.records)


@pytest.mark.parametrize(
    "path, raw",
    [
        ("/api/explain", b'{"text": "\\ud800 ."}'),
        ("/api/explain", b'{"text": "go .", "\\udfff": 1}'),
        ("/api/explain", b'{"text": "go \\udbff\\udbff ."}'),
        ("/api/translations", b'{"texts": ["go .", "\\ud800"]}'),
    ],
)
def test_lone_surrogates_are_4xx_not_500(client, path, raw):
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert isinstance(r.json()["detail"], str) and "Traceback" not in r.text


def test_every_response_has_a_request_id(client):
    ids = {client.get("/healthz").headers["x-request-id"], client.get("/nope").headers["x-request-id"]}
    assert len(ids) == 2 and all(len(i) == 16 for i in ids)
    r = client.get("/nope")
    assert r.status_code == 404 and r.json()["request_id"] == r.headers["x-request-id"]


def test_model_info_and_health(client, translator):
    m = client.get("/api/model").json()
    assert m["model_type"] == "transformer" and m["model"]["num_layers"] == translator.config["model"]["num_layers"]
    assert m["src_vocab_size"] == len(translator.src_vocab) and m["tgt_vocab_size"] == len(translator.tgt_vocab)
    # trained on the shipped sample (conftest's tiny_run): the footer credits the sample, not the Tatoeba corpus
    assert Path(translator.config["data"]["path"]).name == "fra-eng-sample.txt"
    assert "bundled sample" in m["data_attribution"] and "Tatoeba" in m["data_attribution"]  # "not the Tatoeba corpus"
    assert m["max_beam"] == 8 and m["max_chars"] == 500 and m["workers"] == 2
    assert m["max_texts"] == 64 and m["max_body_bytes"] == 65536 and m["max_response_bytes"] == 2_000_000
    cfg = translator.model.config  # the header's label: position scheme and key/value heads
    assert m["positions"] == cfg.positions == "sinusoidal" and m["num_kv_heads"] == cfg.kv_heads == cfg.num_heads
    assert client.get("/healthz").json() == {"status": "ok"}


def test_openapi_lists_routes(client):
    spec = client.get("/openapi.json").json()
    assert {"/api/explain", "/api/translations", "/api/model", "/healthz"} <= set(spec["paths"])
    # The documented error body is the one sent (a string detail), not FastAPI's default list.
    errs = spec["paths"]["/api/explain"]["post"]["responses"]
    assert {"408", "413", "422", "500", "503"} <= set(errs)
    assert errs["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    req = spec["components"]["schemas"]["ExplainRequest"]["properties"]
    beam = next(b for b in req["beam"]["anyOf"] if b.get("type") == "integer")  # or null: the run's default
    assert beam["minimum"] == 1 and beam["maximum"] == MAX_BEAM  # the options' bound; --max-beam narrows it


def test_page_and_static_files(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="cross-heatmap"' in page.text and "CC-BY 2.0" in page.text
    for name in ("app.js", "style.css"):
        assert client.get(f"/static/{name}").status_code == 200


def test_full_queue_answers_503_with_retry_after(client):
    pool = client.app.state.served.pool
    saved = pool.pending
    pool.pending = pool.max_pending  # as if max_pending requests were already waiting
    try:
        r = client.post("/api/explain", json={"text": "go ."})
    finally:
        pool.pending = saved
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert "busy" in r.json()["detail"]
    assert client.post("/api/explain", json={"text": "go ."}).status_code == 200  # and it recovers


def test_pool_counts_pending_and_refuses_beyond_the_bound(translator):
    import asyncio
    import threading

    from attnlab.serve.pool import Busy, TranslatorPool

    pool = TranslatorPool(translator, workers=1, max_pending=2)
    gate = threading.Event()

    async def scenario():
        slow = [asyncio.ensure_future(pool.run(lambda t: gate.wait(5))) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert pool.pending == 2
        with pytest.raises(Busy):
            await pool.run(lambda t: None)
        gate.set()
        await asyncio.gather(*slow)
        assert pool.pending == 0

    try:
        asyncio.run(scenario())
    finally:
        pool.shutdown()
    with pytest.raises(ValueError, match="max_pending"):
        TranslatorPool(translator, workers=1, max_pending=0)
