"""POST /api/translations with decoding options: the same results as `Translator.translate_tokens`
with those DecodeOptions, and every refusal a 422 naming the option."""

from __future__ import annotations

import pytest

from attnlab.decoding.options import DecodeOptions

TEXTS = ["i'm home .", "go .", "he's calm ."]


def test_options_give_the_libraries_nbest_scores_and_alignments(client, translator):
    r = client.post("/api/translations", json={"texts": TEXTS, "beam": 3, "options": {"n_best": 2, "align": True}})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = translator.translate_tokens(TEXTS, options=DecodeOptions(beam=3, n_best=2, align=True))
    assert body["translations"] == [t.text for t in expected]
    for result, t in zip(body["results"], expected):
        assert [h["text"] for h in result["nbest"]] == [h.text for h in t.nbest]
        assert [h["score"] for h in result["nbest"]] == pytest.approx([h.score for h in t.nbest])
        assert result["alignment"] == [list(p) for p in t.alignment]
        assert len(result["nbest"]) == 2


def test_per_text_prefixes_follow_their_texts(client, translator):
    prefixes = [None, "va", None]
    r = client.post("/api/translations", json={"texts": TEXTS, "options": {"prefix": prefixes}})
    assert r.status_code == 200, r.text
    expected = translator.translate(TEXTS, options=translator.options(prefix=prefixes))  # the run's defaults
    assert r.json()["translations"] == expected
    assert r.json()["translations"][1].startswith("va")


def test_seeded_samples_repeat(client):
    body = {"texts": TEXTS[:1], "options": {"sample": True, "n_best": 3, "seed": 7, "top_p": 0.9}}
    first, again = (client.post("/api/translations", json=body).json() for _ in range(2))
    assert first["results"] == again["results"] and len(first["results"][0]["nbest"]) == 3


def test_without_options_the_plain_answer_is_unchanged(client):
    body = client.post("/api/translations", json={"texts": TEXTS}).json()
    assert body["results"] is None


@pytest.mark.parametrize(
    "options, words",
    [
        ({"n_best": 5}, "n_best"),  # above the run's default beam (4)
        ({"sample": True, "top_p": 1.5}, "top_p"),
        ({"temperature": 0}, "temperature"),
        ({"bogus": 1}, "unknown decoding option"),
        ({"scores": False}, "scores cannot be set here"),  # what a library caller reads, not the API's
        ({"sample": True, "n_best": 9}, "at most 8"),
        ({"prefix": ["a", "b"]}, "prefix"),  # two prefixes for three texts
    ],
)
def test_bad_options_are_422_naming_the_option(client, options, words):
    r = client.post("/api/translations", json={"texts": TEXTS, "options": options})
    assert r.status_code == 422, r.text
    assert words in r.text


@pytest.mark.parametrize(
    "options",
    [
        {"prefix": 5},
        {"prefix": [5, 6, 7]},
        {"constraints": 3},
        {"constraints": [[1]]},
        {"constraints": ["", "x"]},
        {"constraints": [["a"], ["b"], 3]},
        {"align_heads": "x"},
        {"align_heads": [99], "align": True},
        {"align": True, "align_layer": 50},
        {"max_len": 0},
        {"seed": -1},
        {"min_len": 10**9},
        {"n_best": True},
        {"length_penalty": "x"},
    ],
)
def test_no_options_payload_is_a_server_error(client, options):
    r = client.post("/api/translations", json={"texts": TEXTS, "beam": 2, "options": options})
    assert r.status_code == 422, (options, r.status_code, r.text)


def test_the_server_narrows_the_options_bound_and_starts_at_the_runs_defaults(client, translator):
    from attnlab.decoding.options import MAX_BEAM
    from attnlab.serve.guard import Limits
    from attnlab.serve.options import decode_options

    assert decode_options(translator, None, None, 8) == translator.defaults  # nothing given: the run's
    with pytest.raises(ValueError, match="beam must be at most 2 on this server"):
        decode_options(translator, None, 3, 2)
    with pytest.raises(ValueError, match="n_best must be at most 2 on this server"):
        decode_options(translator, {"sample": True, "n_best": 3}, None, 2)
    with pytest.raises(ValueError, match=f"max_beam must be at most {MAX_BEAM}"):
        Limits(max_beam=MAX_BEAM + 1)
    info = client.get("/api/model").json()
    assert info["decoding"]["beam"] == translator.defaults.beam and info["max_beam"] == Limits().max_beam
    r = client.post("/api/translations", json={"texts": TEXTS})  # no beam: the run's default
    assert r.json()["beam"] == translator.defaults.beam
    assert r.json()["translations"] == translator.translate(TEXTS)


def test_options_beam_is_the_body_beam(client, translator):
    """options.beam decodes as the body's `beam` (its documented alias) does, and as the library does."""
    by_body = client.post("/api/translations", json={"texts": TEXTS, "beam": 3}).json()
    by_options = client.post("/api/translations", json={"texts": TEXTS, "options": {"beam": 3}}).json()
    assert by_options["beam"] == by_body["beam"] == 3
    want = translator.translate(TEXTS, options=translator.options(beam=3))
    assert by_options["translations"] == by_body["translations"] == want
