"""The explorer and the batching API serving a decoder-only run: its self-attention cut into the three
views, the response bound for them, head switches through any view, the model type named."""

from __future__ import annotations

import pytest
import test_limits  # tests/serve/ is on the path (pytest's rootdir-less import of this folder)
from test_api import _shape

from attnlab.testing import train_tiny


@pytest.fixture(scope="module", params=[False, True], ids=["causal", "prefix-lm"])
def do_translator(request, tmp_path_factory):
    from attnlab.runs.loading import load_translator

    run = train_tiny(tmp_path_factory.mktemp("do") / "run", model="decoder-only", prefix_lm=request.param)
    return load_translator(run)


@pytest.fixture(scope="module")
def do_client(do_translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    with TestClient(create_app(do_translator, workers=2)) as c:
        yield c


def test_model_info_names_the_type_and_every_view(do_client, do_translator):
    m = do_client.get("/api/model").json()
    cfg = do_translator.config["model"]
    assert m["model_type"] == "decoder-only" and m["model"]["prefix_lm"] == cfg["prefix_lm"]
    N, H = cfg["num_layers"], cfg["num_heads"]
    assert m["heads"] == {kind: [H] * N for kind in ("encoder_self", "decoder_self", "cross")}


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_shows_the_three_views(do_client, do_translator, beam):
    r = do_client.post("/api/explain", json={"text": "i'm home .", "beam": beam})
    assert r.status_code == 200, r.text
    d = r.json()
    N, H = do_translator.config["model"]["num_layers"], do_translator.config["model"]["num_heads"]
    Ls, Lt = len(d["src_tokens"]), len(d["tgt_tokens"])
    A = d["attention"]
    assert _shape(A["encoder_self"]) == (N, H, Ls, Ls)
    assert _shape(A["decoder_self"]) == (N, H, Lt, Lt)
    assert _shape(A["cross"]) == (N, H, Lt, Ls)
    assert d["translation"] == do_translator.translate(["i'm home ."], options=do_translator.options(beam=beam))[0]
    for layer in range(N):
        for h in range(H):
            for row in A["encoder_self"][layer][h]:  # a source token sees only source tokens
                assert abs(sum(row) - 1) < 1e-3
            for q in range(Lt):  # a target token's weights: over the source (cross) + the target so far
                own = A["decoder_self"][layer][h][q]
                assert abs(sum(A["cross"][layer][h][q]) + sum(own) - 1) < 1e-3
                assert all(w == 0 for w in own[q + 1 :])
    if not do_translator.config["model"]["prefix_lm"]:  # causal: nothing above the diagonal in the source
        for head in A["encoder_self"][0]:
            assert all(w == 0 for q, row in enumerate(head) for w in row[q + 1 :])


def test_response_size_is_bounded_for_its_maps(do_translator):
    test_limits.test_response_size_is_bounded(do_translator)  # the Transformer's check, on these maps


def test_a_head_switched_off_in_any_view_is_the_same_head(do_client):
    off = {
        kind: do_client.post("/api/explain", json={"text": "i'm home .", "heads_off": {kind: [[0, 0]]}}).json()
        for kind in ("cross", "decoder_self", "encoder_self")
    }
    assert off["cross"]["attention"] == off["decoder_self"]["attention"] == off["encoder_self"]["attention"]
    on = do_client.post("/api/explain", json={"text": "i'm home ."}).json()
    assert off["cross"]["attention"] != on["attention"]
    r = do_client.post("/api/explain", json={"text": "go .", "heads_off": {"cross": [[9, 0]]}})
    assert r.status_code == 422 and "layer 9" in r.json()["detail"]


def test_translations_batch_like_translate(do_client, do_translator):
    texts = ["go .", "i'm home .", "we are friends .", "he is calm ."]
    for beam in (1, 2):
        r = do_client.post("/api/translations", json={"texts": texts, "beam": beam})
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == do_translator.translate(texts, options=do_translator.options(beam=beam))
    r = do_client.post("/api/translations", json={"texts": ["go .", ""]})
    assert r.status_code == 422 and "texts[1]" in r.json()["detail"]
