"""`evaluate` and `heads` on an imported Marian run: with --data they split that corpus and encode it with
the run's own SentencePiece vocabularies; without it they say in one line to pass --data."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main
from attnlab.data import load_data, sample_data_path

pytest.importorskip("transformers")

SAMPLE = str(sample_data_path())


@pytest.fixture(scope="module")
def run(marian_dir, tmp_path_factory):
    from attnlab.export.marian import import_hf

    return import_hf(marian_dir, tmp_path_factory.mktemp("imported") / "opus")


@pytest.mark.parametrize("command", ["evaluate", "heads"])
def test_without_data_one_line_names_the_flag(run, tmp_path, capsys, command):
    argv = [command, "--checkpoint", str(run), "--precision", "fp32", "--limit", "2"]
    assert main(argv + (["--out", str(tmp_path / "h")] if command == "heads" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "imported from" in err and "--data PATH" in err, err


def test_evaluate_with_data_scores_the_corpus_split(run, capsys, one_thread):
    from attnlab.runs.loading import load_imported_data, load_translator

    argv = ["evaluate", "--checkpoint", str(run), "--data", SAMPLE, "--precision", "fp32", "--beam", "1"]
    assert main([*argv, "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "test split, 3 distinct sources" in out and "BLEU" in out
    # The split is the corpus's default one, its ids those of the run's SentencePiece vocabulary.
    tr = load_translator(run)
    data, plain = load_imported_data(tr, run, SAMPLE), load_data({"path": SAMPLE})
    assert [ex.src_text for ex in data.test] == [ex.src_text for ex in plain.test]
    ex = data.test[0]
    assert ex.src_ids == tr.src_vocab.encode(ex.src_text) and ex.tgt_ids == tr.tgt_vocab.encode(ex.tgt_text)
    assert tr.tgt_vocab.reference_text(" Il  est calme. ") == "Il est calme."  # cased, as SentencePiece decodes


def test_heads_with_data(run, tmp_path, capsys, one_thread):
    argv = ["heads", "--checkpoint", str(run), "--out", str(tmp_path / "h"), "--data", SAMPLE, "--precision", "fp32"]
    assert main([*argv, "--limit", "3", "--no-bleu", "--no-curve"]) == 0
    report = json.loads((tmp_path / "h" / "heads.json").read_text())
    assert report["split"] == "valid" and report["sentences"] == 3
    assert set(report["gradient_importance"]) == set(report["num_heads"]) and len(report["num_heads"]) == 6


@pytest.mark.parametrize("errors", ["surrogateescape", "strict"])
def test_translate_stdin_that_is_not_utf8(run, capsys, monkeypatch, errors, one_thread):
    """Bytes that are not UTF-8 become U+FFFD with one warning naming the line; outputs stay aligned."""
    import io
    import sys

    from attnlab.runs.loading import load_translator

    stdin = io.TextIOWrapper(io.BytesIO(b"The cat\xff sleeps.\n\nThe dog.\n"), encoding="utf-8", errors=errors)
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["translate", "--checkpoint", str(run), "--precision", "fp32", "--beam", "1"]) == 0
    captured = capsys.readouterr()
    tr = load_translator(run)
    want = tr.translate(["The cat\ufffd sleeps.", "The dog."], options=tr.options(beam=1))
    assert captured.out.splitlines() == [want[0], "", want[1]]
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "stdin line 1 is not valid UTF-8" in err, err


def test_spm_encode_of_a_lone_surrogate_is_a_value_error(run):
    from attnlab.data import load_vocab

    vocab = load_vocab(run / "src_vocab.json")
    with pytest.raises(ValueError, match="not a Unicode character"):
        vocab.encode("The cat\udcff sleeps.")
