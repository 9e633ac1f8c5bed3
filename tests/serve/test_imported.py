"""The explorer on an imported (Marian / SentencePiece) model: subword pieces on the axes, merged into
words on request, and a model panel that says where the model came from. Uses the tiny random Marian
model of tests/export/conftest.py (no network)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

_spec = importlib.util.spec_from_file_location(
    "_attnlab_marian_fixture", Path(__file__).resolve().parents[1] / "export" / "conftest.py"
)
_marian = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_marian)
marian_dir = _marian.marian_dir  # the fixture, re-exported for this module

TEXT = "The cat sees the old tree."


@pytest.fixture(scope="module")
def imported_client(marian_dir, tmp_path_factory):
    from fastapi.testclient import TestClient

    from attnlab.export.marian import import_hf
    from attnlab.runs.loading import load_translator
    from attnlab.serve.app import create_app

    tr = load_translator(import_hf(marian_dir, tmp_path_factory.mktemp("run") / "opus"))
    with TestClient(create_app(tr)) as c:
        yield c, tr


def test_pieces_merge_into_words_and_rows_still_sum_to_one(imported_client):
    from attnlab.analysis.explanation import explain
    from attnlab.analysis.subwords import merge_subwords

    client, tr = imported_client
    exp = explain(tr, TEXT)
    assert exp.subwords and any(t.startswith("▁") for t in exp.src_tokens)
    words = merge_subwords(exp)
    assert words.merged and words.src_tokens[:2] == ["The", "cat"]
    assert len(words.src_tokens) <= len(exp.src_tokens)
    for kind, W in exp.maps.items():
        ones = W.sum(-1)
        merged = words.maps[kind].sum(-1)
        assert merged.shape[:2] == ones.shape[:2]
        # Every original row summed to 1 (softmax), so every merged row does.
        assert bool(torch.allclose(ones, torch.ones_like(ones), atol=1e-4))
        assert bool(torch.allclose(merged, torch.ones_like(merged), atol=1e-4))

    r = client.post("/api/explain", json={"text": TEXT, "merge_subwords": True}).json()
    assert r["merged"] and r["src_tokens"] == words.src_tokens
    assert len(r["attention"]["cross"][0][0][0]) == len(words.src_tokens)
    plain = client.post("/api/explain", json={"text": TEXT}).json()
    assert plain["subwords"] and not plain["merged"] and plain["src_tokens"] == exp.src_tokens


def test_model_panel_of_an_imported_model(imported_client, marian_dir):
    client, tr = imported_client
    m = client.get("/api/model").json()
    assert m["origin"].startswith("imported from Hugging Face marian") and str(marian_dir.name) in m["origin"]
    assert m["parameters"] == sum(p.numel() for p in tr.model.parameters())
    assert m["heads"]["encoder_self"] == [4, 4]
    assert m["model"]["activation"] == "swish"  # the options Marian needed are shown


def test_notebook_views_merge_subwords(imported_client):
    from attnlab.analysis.explanation import explain
    from attnlab.analysis.notebook import head_view, model_view

    _, tr = imported_client
    exp = explain(tr, TEXT)
    merged = head_view(exp, merge_subwords=True)
    assert merged.data["axes"]["cross"][1][:2] == ["The", "cat"]
    assert model_view(exp).data["axes"]["cross"][1] == exp.src_tokens
