"""`attnlab prepare --preset NAME` builds the vocabulary that preset trains on: README's en-fr "your own data"
commands run as written with `--preset laptop` (one joint vocabulary for its shared embeddings), and a
mismatch is one line that names the flags."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

from attnlab.cli import main
from attnlab.data import sample_data_path

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_command(start: str) -> list[str]:
    line = next(x for x in README.read_text(encoding="utf-8").splitlines() if x.startswith(start))
    return shlex.split(re.sub(r"\s+#.*$", "", line))[1:]  # without `attnlab` and the comment


def test_readme_en_fr_commands_train_laptop_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copy(sample_data_path(), "train.tsv")  # the user's own en-fr TSV
    assert main(_readme_command("attnlab prepare --data train.tsv")) == 0
    assert main([*_readme_command("attnlab train --preset laptop --data data/en-fr"), "--time-budget", "1"]) == 0
    model = json.loads(Path("runs/en-fr/config.json").read_text(encoding="utf-8"))["model"]
    assert model["share_embeddings"] and model["src_vocab_size"] == model["tgt_vocab_size"]
    src, tgt = (
        json.loads(Path(f"data/en-fr/{side}_vocab.json").read_text(encoding="utf-8")) for side in ("src", "tgt")
    )
    assert src["model"] == tgt["model"]  # one joint subword model, each side labelled with its language


def test_word_vocabularies_under_a_shared_embeddings_preset_are_one_line_naming_the_flags(tmp_path, capsys):
    prepare = ["prepare", "--data", str(sample_data_path()), "--src-lang", "en", "--tgt-lang", "fr"]
    assert main([*prepare, "--preset", "laptop", "--tokenizer", "word", "--out", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tokenizer bpe" in err and not (tmp_path / "no").exists()
    assert main([*prepare, "--out", str(tmp_path / "words")]) == 0
    assert "prepare with --preset laptop" in capsys.readouterr().out  # the book's words: said what laptop needs
    train = ["train", "--preset", "laptop", "--data", str(tmp_path / "words"), "--out", str(tmp_path / "run")]
    assert main([*train, "--time-budget", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--preset laptop" in err and "--set model.share_embeddings=false" in err
