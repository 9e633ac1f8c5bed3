"""Every surface of `DecodeOptions` is generated from its fields' metadata: the command line's flags, the JSON
API's `options` (and its OpenAPI text), a run's generation.json and `plain`. Each check here compares a surface
with the dataclass's own field list, so a field added to DecodeOptions shows up everywhere or fails here."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from attnlab.cli import build_parser
from attnlab.commands._common import FLAGS, decode_options
from attnlab.decoding.options import API_OPTIONS, DEFAULTABLE, SAMPLING, TRANSLATOR_DEFAULTS, DecodeOptions
from attnlab.runs.generation import read_generation

ALL = [f.name for f in fields(DecodeOptions)]
# What a library caller reads back (HF's output_scores / return_dict_in_generate): no flag, not in the API.
RETURNED = {"scores", "trace"}


def _subparser(name: str):
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command" or a.__class__.__name__ == "_SubParsersAction"]
    return sub.choices[name]


def test_every_field_says_what_it_does():
    for f in fields(DecodeOptions):
        assert len(f.metadata.get("help", "").split()) >= 3, f.name


def test_translate_has_one_flag_per_field_and_it_sets_that_field():
    p = _subparser("translate")
    dests = {a.dest: a.option_strings[-1] for a in p._actions if a.dest in ALL}
    assert set(dests) == set(ALL) - RETURNED == set(FLAGS)
    assert dests == FLAGS
    argv = ["--beam", "3", "--n-best", "2", "--length-penalty", "0.5", "--early-stopping", "--min-len", "1",
            "--max-len", "20", "--no-repeat-ngram", "2", "--prefix", "je", "--constraint", "moi", "--constraint",
            "moi", "--align", "--align-layer", "0", "--align-heads", "0,1"]  # fmt: skip
    got = decode_options(p.parse_args(argv + ["--checkpoint", "x"]), DecodeOptions())
    want = DecodeOptions(beam=3, n_best=2, length_penalty=0.5, early_stopping=True, min_len=1, max_len=20,
                         no_repeat_ngram=2, prefix="je", constraints=("moi", "moi"), align=True, align_layer=0,
                         align_heads=(0, 1))  # fmt: skip
    assert got == want
    argv = ["--sample", "--n-best", "3", "--temperature", "0.5", "--top-k", "5", "--top-p", "0.9", "--seed", "7"]
    got = decode_options(p.parse_args(argv), TRANSLATOR_DEFAULTS)
    assert got == DecodeOptions(sample=True, n_best=3, temperature=0.5, top_k=5, top_p=0.9, seed=7)
    assert decode_options(p.parse_args([]), TRANSLATOR_DEFAULTS) == TRANSLATOR_DEFAULTS  # nothing given


def test_evaluate_takes_the_same_flags_for_its_fields():
    p = _subparser("evaluate")
    assert {a.dest: a.option_strings[-1] for a in p._actions if a.dest in ALL} == {
        "beam": FLAGS["beam"],
        "length_penalty": FLAGS["length_penalty"],
    }


def test_the_api_schema_names_exactly_the_api_fields():
    from attnlab.serve.schemas import ExplainRequest, TranslationsRequest

    for model in (ExplainRequest, TranslationsRequest):
        text = model.model_json_schema()["properties"]["options"]["description"]
        named = {name for name in ALL if f"{name}: " in text}
        assert named == set(API_OPTIONS) == set(ALL) - RETURNED
        for f in fields(DecodeOptions):
            if f.name in API_OPTIONS:
                assert f.metadata["help"] in text


# One valid non-default value of each field the API takes.
VALUES = {"beam": 3, "n_best": 2, "sample": True, "temperature": 0.5, "top_k": 3, "top_p": 0.9, "seed": 1,
          "length_penalty": 0.5, "early_stopping": True, "min_len": 1, "max_len": 9, "no_repeat_ngram": 2,
          "prefix": "a", "constraints": ["a"], "align": True, "align_layer": 0, "align_heads": [0]}  # fmt: skip


def test_the_api_takes_every_api_field_and_refuses_the_others():
    from types import SimpleNamespace

    from attnlab.serve.options import decode_options as api_options

    translator = SimpleNamespace(defaults=TRANSLATOR_DEFAULTS)
    assert set(VALUES) == set(API_OPTIONS)
    for name, value in VALUES.items():
        needs = {"sample": True} if name in SAMPLING else {"align": True} if name.startswith("align_") else {}
        assert getattr(api_options(translator, {**needs, name: value}, None, 16), name) == value
    for name in RETURNED:
        with pytest.raises(ValueError, match=f"{name} cannot be set here"):
            api_options(translator, {name: getattr(TRANSLATOR_DEFAULTS, name)}, None, 16)


def test_a_runs_generation_json_may_set_exactly_the_defaultable_fields(tmp_path):
    searched = {f.name for f in fields(DecodeOptions) if f.name not in RETURNED and f.metadata["defaultable"]}
    assert set(DEFAULTABLE) == searched
    (tmp_path / "generation.json").write_text(json.dumps({k: getattr(TRANSLATOR_DEFAULTS, k) for k in DEFAULTABLE}))
    assert read_generation(tmp_path) == TRANSLATOR_DEFAULTS
    for name in sorted(set(ALL) - set(DEFAULTABLE) - RETURNED):
        (tmp_path / "generation.json").write_text(json.dumps({name: getattr(TRANSLATOR_DEFAULTS, name)}))
        with pytest.raises(ValueError, match=name):
            read_generation(tmp_path)


def test_plain_is_every_search_shaping_field_at_its_default():
    """plain (what the explorer traces) turns False for a changed search-shaping field and only for one."""
    changed = {"n_best": 2, "sample": True, "min_len": 1, "max_len": 5, "no_repeat_ngram": 2, "prefix": "a",
               "constraints": ("a",), "beam": 3, "length_penalty": 0.5, "early_stopping": True, "align": True,
               "scores": False, "trace": True}  # fmt: skip
    for name, value in changed.items():
        base = {"beam": 4} if name in ("n_best",) else {}
        opts = DecodeOptions(**base, **{name: value})
        assert opts.plain is not fields_mark(name), name
    assert DecodeOptions(constraints=[]).plain  # an empty list is the default empty tuple


def fields_mark(name: str) -> bool:
    return next(f for f in fields(DecodeOptions) if f.name == name).metadata["plain"]
