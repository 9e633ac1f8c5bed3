"""The explorer's head masks, importance strip, beam trace, subword merging and model panel (API level)."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis.explanation import explain, head_masks_for
from attnlab.analysis.subwords import merge_maps, word_groups
from attnlab.attention import mask_heads

TEXT = "i'm home ."


def post(client, **body):
    return client.post("/api/explain", json={"text": TEXT, **body})


def test_masking_heads_changes_maps_and_equals_mask_heads(client, translator):
    off = {"encoder_self": [[0, 0], [1, 1]], "cross": [[0, 1]]}
    full, masked = post(client).json(), post(client, heads_off=off).json()
    assert masked["heads_off"] == off and full["heads_off"] == {}
    assert masked["attention"]["encoder_self"] != full["attention"]["encoder_self"]
    # The same heads switched off with the library's mask_heads, by module name.
    model = translator.model
    names = {id(m): n for n, m in model.named_modules()}
    kinds = model.attention_kinds()
    masks = {
        names[id(kinds["encoder_self"][0])]: [0, 1],
        names[id(kinds["encoder_self"][1])]: [1, 0],
        names[id(kinds["cross"][0])]: [1, 0],
    }
    with mask_heads(model, masks):
        ref = explain(translator, TEXT)
        ref_translation = translator.translate([TEXT])[0]
    assert masked["translation"] == ref.translation == ref_translation
    for kind, W in ref.maps.items():
        assert torch.tensor(masked["attention"][kind]) == pytest.approx(W, abs=1e-4)
    # The mask lived only in that request: the next one is the full model again.
    assert post(client).json()["attention"] == full["attention"]


def test_masking_every_cross_head_changes_the_translation(client, translator):
    H, N = translator.model.config.num_heads, translator.model.config.num_layers
    every = [[layer, h] for layer in range(N) for h in range(H)]
    off = {"cross": every, "encoder_self": every}
    texts = [TEXT, "go .", "he's calm .", "i lost ."]
    masked = [post(client, text=t, heads_off=off).json()["translation"] for t in texts]
    full = [post(client, text=t).json()["translation"] for t in texts]
    # Without cross-attention the source cannot reach the decoder: one translation for every source,
    # which changes those the full model translates otherwise.
    assert len(set(masked)) == 1 and len(set(full)) > 1
    assert [m != f for m, f in zip(masked, full)].count(True) >= len(texts) - 1
    with mask_heads(translator.model, head_masks_for(translator.model, off)):
        assert masked == translator.translate(texts)


@pytest.mark.parametrize(
    "heads_off,words",
    [
        ({"cross": [[9, 0]]}, "layer 9 out of range"),
        ({"cross": [[0, 99]]}, "head 99 out of range"),
        ({"cross": [[0, -1]]}, "head -1 out of range"),
        ({"cross": [[0]]}, "heads_off.cross"),
        ({"cross": [["0", 1]]}, "heads_off.cross"),
        ({"cross": [[0, True]]}, "heads_off.cross"),
        ({"decoder": [[0, 0]]}, "decoder"),
        ({"cross": "0,1"}, "heads_off.cross"),
        ([[0, 1]], "heads_off"),
    ],
)
def test_bad_masks_are_422_with_a_clear_message(client, heads_off, words):
    r = post(client, heads_off=heads_off)
    assert r.status_code == 422, r.text
    assert words in r.json()["detail"]


def test_importance_strip_defaults_to_this_translations_confidence(client, translator):
    out = post(client).json()
    imp = out["importance"]
    assert "confidence" in imp["source"]
    for kind, W in out["attention"].items():
        conf = torch.tensor(W).max(dim=-1).values.mean(dim=-1)
        assert torch.tensor(imp["values"][kind]) == pytest.approx(conf, abs=1e-3)


def test_importance_from_heads_json(translator, tmp_path):
    import json

    from fastapi.testclient import TestClient

    from attnlab.commands.serve import load_importance
    from attnlab.serve.app import create_app

    names = {n: m.num_heads for n, m in translator.model.named_modules() if hasattr(m, "num_heads")}
    values = {n: [float(i + 10 * k) for i in range(h)] for k, (n, h) in enumerate(sorted(names.items()))}
    (tmp_path / "heads").mkdir()
    (tmp_path / "heads" / "heads.json").write_text(json.dumps({"gradient_importance": values}))
    imp = load_importance(None, tmp_path, translator.model)
    assert "heads.json" in imp["source"]
    with TestClient(create_app(translator, importance=imp)) as c:
        got = post(c).json()["importance"]
        assert c.get("/api/model").json()["importance_source"] == imp["source"]
    kinds = translator.model.attention_kinds()
    mod = {id(m): n for n, m in translator.model.named_modules()}
    assert got["values"]["cross"] == [values[mod[id(m)]] for m in kinds["cross"]]
    with pytest.raises(FileNotFoundError, match="--heads"):
        load_importance(str(tmp_path / "nope.json"), tmp_path, translator.model)
    assert load_importance(None, tmp_path / "heads", translator.model) is None


@pytest.mark.parametrize("beam", [2, 4])
def test_beam_trace_matches_the_returned_translation(client, translator, beam):
    out = post(client, beam=beam).json()
    assert out["translation"] == translator.translate([TEXT], options=translator.options(beam=beam))[0]
    tr = out["beam_trace"]
    steps = {s["step"]: s for s in tr["steps"]}
    chosen = [steps[s]["candidates"][i] for s, i in tr["path"]]
    assert [c["text"] for c in chosen] == out["tgt_tokens"]
    assert tr["path"][-1] == tr["winner"]
    assert all(c["status"] in ("live", "finished", "cut") for c in chosen)
    assert post(client, beam=1).json()["beam_trace"] is None
    assert post(client, beam=beam, trace=False).json()["beam_trace"] is None


def test_word_groups_and_merge_keep_rows_stochastic():
    toks = ["▁je", "▁suis", "▁ch", "ez", "▁moi", ".", "</s>"]
    assert word_groups(toks) == [[0], [1], [2, 3], [4, 5], [6]]
    keys = ["<pad>", "▁je", "▁suis", "▁ch", "ez", "▁moi", "."]
    torch.manual_seed(0)
    W = torch.softmax(torch.randn(2, 3, len(toks), len(keys)), dim=-1)
    M = merge_maps(W, word_groups(toks), word_groups(keys))
    assert M.shape == (2, 3, 5, 5)
    assert M.sum(-1) == pytest.approx(torch.ones(2, 3, 5), abs=1e-6)
    # keys summed: word "chez" as a key gets both pieces' weight; queries averaged.
    assert M[0, 0, 0, 3] == pytest.approx(W[0, 0, 0, 3] + W[0, 0, 0, 4])
    assert M[0, 0, 2, 1] == pytest.approx((W[0, 0, 2, 1] + W[0, 0, 3, 1]) / 2)


def test_merge_request_on_word_tokens_is_a_no_op(client):
    full, merged = post(client).json(), post(client, merge_subwords=True).json()
    assert full["subwords"] is False and merged["merged"] is False
    assert merged["attention"] == full["attention"]


def test_model_panel_says_origin_size_and_heads(client, translator):
    m = client.get("/api/model").json()
    assert m["origin"].startswith("trained with attnlab")
    assert m["parameters"] == sum(p.numel() for p in translator.model.parameters())
    cfg = translator.model.config
    assert m["heads"]["cross"] == [cfg.num_heads] * cfg.num_layers


def test_origin_of_an_imported_model():
    from attnlab.serve.routes.model import model_origin

    assert "imported from Hugging Face marian" in model_origin(
        {"data": {"source": "hf", "hf_model_type": "marian", "hf_source": "/m/opus-mt-en-fr"}}
    )


def test_empty_mask_lists_are_fine_even_for_kinds_a_model_lacks(translator):
    assert head_masks_for(translator.model, {"encoder_self": [], "cross": []}) == {}
    assert head_masks_for(translator.model, None) == {}
