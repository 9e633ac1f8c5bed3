"""The run's alignment head (RUN/alignment.json, from `attnlab heads`) is the default alignment of both
POST /api/explain and POST /api/translations; one naming a head the model lacks is a 422."""

from __future__ import annotations

import json
import shutil

import pytest

from attnlab.decoding.options import DecodeOptions

TEXTS = ["i'm home .", "he's calm ."]


def _app(run):
    from fastapi.testclient import TestClient

    from attnlab.runs.loading import load_translator
    from attnlab.serve.app import create_app

    translator = load_translator(run)
    return translator, TestClient(create_app(translator, workers=1))


@pytest.fixture
def chosen_run(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    return run


def _write(run, layer, heads):
    choice = {"layer": layer, "heads": heads, "criterion": "test", "score": 0.5, "attnlab_version": "test"}
    (run / "alignment.json").write_text(json.dumps(choice))


def test_both_endpoints_align_with_the_runs_head(chosen_run):
    _write(chosen_run, 0, [1])
    translator, client = _app(chosen_run)
    explicit = DecodeOptions(beam=2, align=True, align_layer=0, align_heads=(1,))
    expected = [t.alignment for t in translator.translate_tokens(TEXTS, options=explicit)]
    with client:
        r = client.post("/api/translations", json={"texts": TEXTS, "beam": 2, "options": {"align": True}})
        assert r.status_code == 200, r.text
        assert [[tuple(p) for p in res["alignment"]] for res in r.json()["results"]] == expected
        r = client.post("/api/explain", json={"text": TEXTS[0], "beam": 2, "options": {"align": True}})
        assert r.status_code == 200, r.text
        assert [tuple(p) for p in r.json()["alignment"]["pairs"]] == expected[0]


def test_a_head_the_model_lacks_is_a_422(chosen_run):
    _write(chosen_run, 0, [99])
    _, client = _app(chosen_run)
    with client:
        for path, body in (("/api/translations", {"texts": TEXTS}), ("/api/explain", {"text": TEXTS[0]})):
            r = client.post(path, json={**body, "options": {"align": True}})
            assert r.status_code == 422 and "alignment.json" in r.text and "got [99]" in r.text, r.text
        assert client.post("/api/explain", json={"text": TEXTS[0]}).status_code == 200  # no align: unaffected
