"""POST /api/explain (the explorer's) with decoding options: the maps are those of the best hypothesis
`Translator.translate_tokens` finds with the same DecodeOptions (fp32), `nbest` and `alignment` are its
n-best list and word alignment, and every refusal is a 422 naming the option."""

from __future__ import annotations

import pytest

from attnlab.decoding.options import DecodeOptions

TEXT = "i'm home ."


def _post(client, **body):
    return client.post("/api/explain", json={"text": TEXT, **body})


@pytest.mark.parametrize("where", ["options", "body", "both"])
def test_nbest_and_alignment_are_the_libraries(client, translator, where):
    """options.beam, or the body's `beam` (its alias), or both saying the same: one answer."""
    beam = {"beam": 3} if where != "body" else {}
    r = _post(client, **({"beam": 3} if where != "options" else {}), options={"n_best": 2, "align": True, **beam})
    assert r.status_code == 200, r.text
    body = r.json()
    (t,) = translator.translate_tokens([TEXT], options=DecodeOptions(beam=3, n_best=2, align=True))
    assert body["translation"] == t.text and body["tgt_tokens"][: len(t.tgt_tokens)] == t.tgt_tokens
    assert [h["text"] for h in body["nbest"]] == [h.text for h in t.nbest]
    assert [h["score"] for h in body["nbest"]] == pytest.approx([h.score for h in t.nbest])
    assert all(h["constraints_met"] is None for h in body["nbest"])
    al = body["alignment"]
    assert al["pairs"] == [list(p) for p in t.alignment]
    assert al["source_words"] == TEXT.split() and al["target_words"] == t.text.split()
    assert len(al["source_token_words"]) == len(t.src_tokens) - 1  # <eos> aside
    assert len(al["target_token_words"]) == len(t.tgt_tokens)
    assert body["beam_trace"] is None  # n-best: not the plain search the trace records


def test_constraints_and_prefix(client, translator):
    words = translator.translate([TEXT])[0].split()
    phrase = next((w for w in reversed(words) if w.isalpha()), words[0])
    opts = {"n_best": 2, "constraints": [phrase], "prefix": words[0]}
    r = _post(client, beam=3, options=opts)
    assert r.status_code == 200, r.text
    body = r.json()
    (t,) = translator.translate_tokens([TEXT], options=DecodeOptions(beam=3, **opts))
    assert [h["text"] for h in body["nbest"]] == [h.text for h in t.nbest]
    assert body["nbest"][0]["constraints_met"] is True and phrase in body["translation"].split()
    assert body["translation"].startswith(words[0])


def test_seeded_samples_are_the_libraries(client, translator):
    opts = {"sample": True, "n_best": 3, "seed": 5, "temperature": 1.5, "top_p": 0.9}
    body = _post(client, options=opts).json()
    (t,) = translator.translate_tokens([TEXT], options=DecodeOptions(**opts))
    assert [h["text"] for h in body["nbest"]] == [h.text for h in t.nbest]
    assert body["translation"] == t.text


def test_plain_options_keep_the_trace_and_no_options_one_hypothesis(client, translator):
    body = _post(client, beam=3, options={"align": True}).json()
    assert body["beam_trace"] is not None and body["alignment"]["pairs"]
    plain = _post(client, beam=3).json()
    assert [h["text"] for h in plain["nbest"]] == [plain["translation"]] and plain["alignment"] is None
    assert (
        plain["translation"]
        == body["translation"]
        == translator.translate([TEXT], options=translator.options(beam=3))[0]
    )


@pytest.mark.parametrize(
    "beam, options, words",
    [
        (1, {"n_best": 2}, "n_best"),  # above the beam
        (3, {"sample": True}, "sample"),  # sampling takes no beam
        (1, {"sample": True, "top_p": 0}, "top_p"),
        (1, {"bogus": 1}, "unknown decoding option"),
        (1, {"beam": 2}, "differ"),  # the body's beam is options.beam's alias: two values are refused
        (1, {"trace": True}, "trace cannot be set here"),  # the body's own trace, not the library's
        (1, {"sample": True, "n_best": 9}, "at most 8"),
        (1, {"prefix": ["a", "b"]}, "prefix"),
        (1, {"constraints": [["a"]]}, "constraints"),
        (1, {"constraints": ["zzqxv"]}, "constraint"),  # not in the target vocabulary
        (1, {"align": True, "align_layer": 50}, "align_layer"),
        (1, {"align_heads": [0]}, "align"),
        (1, {"max_len": 0}, "max_len"),
        (1, {"prefix": 3}, "prefix"),
    ],
)
def test_bad_options_are_422_naming_the_option(client, beam, options, words):
    r = _post(client, beam=beam, options=options)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("options: ") and words in r.json()["detail"]


def test_a_long_max_len_is_bounded_by_the_response_limit(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app
    from attnlab.serve.guard import Limits

    with TestClient(create_app(translator, limits=Limits(max_response_bytes=200_000))) as c:
        r = c.post("/api/explain", json={"text": TEXT, "options": {"max_len": 1024}})
    assert r.status_code == 413, r.text
