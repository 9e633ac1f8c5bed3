"""Values the arithmetic cannot take, over REST: a temperature float32 cannot divide by, a text of
invisible characters; and `serve` naming the broken file of a run. Each is one 4xx (or one line)."""

from __future__ import annotations

import shutil

import pytest

from attnlab.commands.serve import load_checkpoint


@pytest.mark.parametrize("t", [1e-40, 1e-300, 5e-324])
def test_a_tiny_temperature_is_422_on_both_routes(client, t):
    opts = {"sample": True, "temperature": t}
    r = client.post("/api/translations", json={"texts": ["go ."], "beam": 1, "options": opts})
    assert r.status_code == 422 and "temperature must be a finite number >= 0.0001" in r.json()["detail"], r.text
    r = client.post("/api/explain", json={"text": "go .", "beam": 1, "options": opts})
    assert r.status_code == 422 and "temperature" in r.json()["detail"], r.text


def test_a_text_of_zero_width_spaces_is_refused_as_blank_ones_are(client):
    for text in ["   ", "\u200b\u200b\u200b", "\u200b \ufeff\u2060"]:
        r = client.post("/api/translations", json={"texts": [text]})
        assert r.status_code == 422 and "the text is empty" in r.json()["detail"], r.text


def test_serve_names_the_broken_file(tiny_run, tmp_path):
    run = shutil.copytree(tiny_run, tmp_path / "run")
    (run / "tgt_vocab.json").write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(ValueError, match=r"tgt_vocab\.json nests arrays or objects more than 32 deep") as e:
        load_checkpoint(str(run))
    assert "\n" not in str(e.value)
