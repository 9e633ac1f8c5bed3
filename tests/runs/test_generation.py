"""RUN/generation.json: a run's decoding defaults, written with a translator run, read back, refused in one
line when damaged."""

from __future__ import annotations

import pytest

from attnlab.decoding.options import TRANSLATOR_DEFAULTS, DecodeOptions
from attnlab.runs.generation import read_generation, write_generation


def test_written_and_read_back(tmp_path):
    assert read_generation(tmp_path) == TRANSLATOR_DEFAULTS and TRANSLATOR_DEFAULTS.beam == 4  # no file
    write_generation(tmp_path, DecodeOptions(beam=6, length_penalty=0.6, no_repeat_ngram=3))
    assert read_generation(tmp_path) == DecodeOptions(beam=6, length_penalty=0.6, no_repeat_ngram=3)


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "is not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nests arrays or objects more than 32 deep"),
        ('{"beam": 4, "n_best": 3}', "sets n_best=3; ask for n-best lists per call"),
        ('{"beam": 4, "min_len": 50}', "sets min_len=50, more than a one-token sentence's output limit"),
        ("[4]", "must hold a JSON object"),
        ('{"beam": 4, "prefix": "je"}', "sets prefix; it may set only"),
        ('{"beam": 0}', "beam must be an integer >= 1"),
    ],
)
def test_a_damaged_file_is_one_line_naming_it(tmp_path, text, words):
    (tmp_path / "generation.json").write_text(text)
    with pytest.raises(ValueError, match=words) as e:
        read_generation(tmp_path)
    assert str(tmp_path / "generation.json") in str(e.value) and "\n" not in str(e.value)
    assert "delete it (the run then decodes with beam 4)" in str(e.value)


@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_a_generation_json_that_is_not_a_file_is_refused_not_ignored(tmp_path, kind):
    path = tmp_path / "generation.json"
    if kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises((ValueError, FileNotFoundError), match=r"generation\.json") as e:
        read_generation(tmp_path)
    assert "\n" not in str(e.value) and ("folder" in str(e.value) or "link to nothing" in str(e.value))
