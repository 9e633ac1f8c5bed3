"""`attnlab translate` with decoding options on a tiny run trained on the bundled sample: output formats
(n-best lines, alignments) and one-line refusals."""

from __future__ import annotations

import re

import pytest

from attnlab.cli import main
from attnlab.testing import train_tiny

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_thread):
    return train_tiny(tmp_path_factory.mktemp("decode") / "run", steps=20)


def _out(capsys, argv):
    assert main(["translate", "--checkpoint", str(argv[0]), *argv[1:]]) == 0
    return capsys.readouterr().out.splitlines()


def test_n_best_lines_are_index_text_score(run_dir, capsys):
    lines = _out(capsys, [run_dir, "--beam", "4", "--n-best", "3", "go .", "i'm home ."])
    assert len(lines) == 6
    fields = [line.split(" ||| ") for line in lines]
    assert [f[0] for f in fields] == ["0"] * 3 + ["1"] * 3
    for f in fields:
        assert len(f) == 3 and re.fullmatch(r"-?\d+\.\d{4}", f[2])
    scores = [float(f[2]) for f in fields]
    assert scores[:3] == sorted(scores[:3], reverse=True) and len({f[1] for f in fields[:3]}) == 3
    plain = _out(capsys, [run_dir, "--beam", "4", "go .", "i'm home ."])
    assert plain == [fields[0][1], fields[3][1]]  # the n-best list starts with the plain beam's answer


def test_default_is_beam_4_and_sampling_needs_no_beam(run_dir, capsys):
    from attnlab.runs.loading import load_translator

    texts = ["go .", "i'm home .", "he's calm ."]
    tr = load_translator(run_dir)
    beam4, greedy = tr.translate(texts, options=tr.options(beam=4)), tr.translate(texts, options=tr.options(beam=1))
    assert beam4 != greedy  # else the first check could not tell the defaults apart
    assert _out(capsys, [run_dir, *texts]) == beam4
    assert _out(capsys, [run_dir, "--beam", "1", *texts]) == greedy
    assert len(_out(capsys, [run_dir, "--sample", "--seed", "1", *texts])) == 3  # --sample alone: no beam clash


def test_align_appends_pharaoh_pairs(run_dir, capsys):
    lines = _out(capsys, [run_dir, "--align", "--beam", "2", "i'm home ."])
    text, pairs = lines[0].split(" ||| ")
    got = [tuple(map(int, p.split("-"))) for p in pairs.split()]
    assert [j for _, j in got] == list(range(len(text.split())))
    assert all(0 <= i < 3 for i, _ in got)
    flags = ["--align", "--align-layer", "0", "--align-heads", "0", "--n-best", "2", "--beam", "2"]
    lines = _out(capsys, [run_dir, *flags, "i'm home ."])
    assert all(len(line.split(" ||| ")) == 4 for line in lines)


def test_sampling_prefix_and_constraints(run_dir, capsys):
    a = _out(capsys, [run_dir, "--sample", "--n-best", "3", "--seed", "5", "--top-p", "0.9", "go ."])
    assert a == _out(capsys, [run_dir, "--sample", "--n-best", "3", "--seed", "5", "--top-p", "0.9", "go ."])
    assert len(a) == 3
    lines = _out(capsys, [run_dir, "--prefix", "je", "--no-repeat-ngram", "2", "--min-len", "3", "go .", "i'm home ."])
    assert all(line.startswith("je") for line in lines)
    lines = _out(capsys, [run_dir, "--beam", "4", "--constraint", "chez moi", "--constraint", "va", "i'm home ."])
    assert "chez moi" in lines[0] and "va" in lines[0].split()


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--beam", "2", "--n-best", "3"], "--n-best must be an integer >= 1 and <= 2"),
        (["--sample", "--top-p", "0"], "--top-p must be a finite number > 0 and <= 1"),
        (["--sample", "--top-p", "1.5"], "--top-p"),
        (["--sample", "--temperature", "0"], "--temperature must be a finite number >= 0.0001"),
        (["--sample", "--temperature", "-1"], "--temperature"),
        (["--top-k", "5"], "add sample (--sample)"),
        (["--beam", "3", "--constraint", ""], "empty phrase"),
        (["--beam", "3", "--max-len", "2", "--constraint", "je suis chez moi"], "output limit is 2"),
        (["--prefix", "zzzq qqqz"], "--prefix: the prefix 'zzzq qqqz' has a word the target vocabulary does not know"),
        (["--align", "--align-layer", "7"], "align_layer must be a decoder layer"),
        (["--align", "--align-heads", "x"], "--align-heads must be head indices"),
        (["--max-len", "0"], "--max-len must be an integer >= 1"),
        (["--n-best", "0"], "--n-best must be an integer >= 1"),
        (["--sample", "--n-best", "0"], "--n-best must be an integer >= 1"),
        (["--seed", "3"], "--seed applies only to sampling; add sample (--sample)"),
        (["--min-len", "1000"], "--min-len 1000 leaves no room for the <eos> of sentence 0"),
        (["--max-len", "8", "--min-len", "8"], "--min-len must be an integer >= 0 and <= 7"),
        (["--prefix", "😀😀"], "has a word the target vocabulary does not know"),
        (["--no-repeat-ngram", "2", "--constraint", "je suis je suis"], "which no_repeat_ngram 2 forbids"),
    ],
)
def test_bad_decoding_flags_are_one_line_exit_2(run_dir, capsys, flags, words):
    assert main(["translate", "--checkpoint", str(run_dir), *flags, "go ."]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err


def test_a_flag_not_given_takes_the_runs_decoding_defaults(run_dir, tmp_path, capsys):
    """RUN/generation.json (written by training) holds the defaults: translate without --beam decodes as it
    says, and a run without the file decodes with beam 4."""
    import json
    import shutil

    from attnlab.runs.generation import read_generation

    assert read_generation(run_dir).beam == 4 and (run_dir / "generation.json").is_file()
    texts = ["go .", "i'm home .", "he's calm ."]
    beam1, beam4 = _out(capsys, [run_dir, "--beam", "1", *texts]), _out(capsys, [run_dir, "--beam", "4", *texts])
    assert _out(capsys, [run_dir, *texts]) == beam4 != beam1  # the texts tell the two apart
    mine = tmp_path / "run"
    shutil.copytree(run_dir, mine)
    (mine / "generation.json").write_text(json.dumps({"beam": 1}))
    assert _out(capsys, [mine, *texts]) == beam1
    (mine / "generation.json").unlink()
    assert _out(capsys, [mine, *texts]) == beam4
    (mine / "generation.json").write_text(json.dumps({"beam": 1, "prefix": "je"}))
    assert main(["translate", "--checkpoint", str(mine), "go ."]) == 2
    assert "may set only" in capsys.readouterr().err


def _n_best(capsys, run_dir, texts, *flags) -> list[list[tuple[str, float]]]:
    """Per text, its (translation, score) list from `translate --beam 4 --n-best 4 *flags`."""
    lines = _out(capsys, [run_dir, "--beam", "4", "--n-best", "4", *flags, *texts])
    lists: list[list[tuple[str, float]]] = [[] for _ in texts]
    for line in lines:
        i, text, score = line.split(" ||| ")
        lists[int(i)].append((text, float(score)))
    return lists


TEXTS = ["go .", "i'm home .", "he's calm .", "we are friends .", "i lost .", "who ran ?"]


def test_early_stopping_ends_the_search_at_the_kth_finished_hypothesis(run_dir, capsys):
    """Without --early-stopping the search goes on while a live hypothesis could still win, so it finds all the
    early-stopped search found and maybe better: rank by rank its scores are at least as high."""
    on, off = _n_best(capsys, run_dir, TEXTS, "--early-stopping"), _n_best(capsys, run_dir, TEXTS)
    for stopped, full in zip(on, off):
        assert all(f[1] >= s[1] for s, f in zip(stopped, full))
    assert on != off  # on this model the flag changes at least one list


def test_length_penalty_divides_each_score_by_its_length_to_the_penalty(run_dir, capsys):
    """--length-penalty 0 prints the total log-probability; 2 prints it over (tokens + <eos>) ** 2, so for a
    hypothesis in both lists the ratio of its scores is a square of a whole length."""
    plain, penalized = (
        _n_best(capsys, run_dir, TEXTS, "--length-penalty", "0"),
        _n_best(capsys, run_dir, TEXTS, "--length-penalty", "2"),
    )
    assert plain != penalized
    ratios = [
        (total / score) ** 0.5
        for a, b in zip(plain, penalized)
        for text, total in a
        for other, score in b
        if text == other
    ]
    assert len(ratios) >= 6
    for length in ratios:
        assert length >= 2 and abs(length - round(length)) < 0.05, ratios
