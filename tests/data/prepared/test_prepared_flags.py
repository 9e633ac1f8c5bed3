"""`train --data PREPARED` refuses a data flag that disagrees with the folder or has no meaning for it."""

import re

import pytest
from test_prepared_shards import write_corpus  # tests/data/prepared is on sys.path (no __init__)

from attnlab.cli import main
from attnlab.data import check_prepared_overrides, prepare


@pytest.fixture(scope="module")
def prep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flags")
    spec, _, _ = write_corpus(folder, n=60)
    prepare(spec, folder / "prep", src_lang="de", tgt_lang="en", vocab_size=100, log=lambda line: None)
    return folder / "prep"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--src-lang", "fr"], "--src-lang 'fr' disagrees with the prepared corpus .*, made with src_lang='de'"),
        (["--tgt-lang", "fr"], "--tgt-lang 'fr' disagrees .* made with tgt_lang='en'"),
        (["--tokenizer", "word"], "--tokenizer 'word' disagrees .* made with tokenizer='bpe'"),
        (["--max-len", "20"], "--max-len 20 disagrees .* made with max_len=None"),
        (["--num-examples", "5"], "--num-examples 5 disagrees .* made with num_examples=None"),
        (["--valid", "dev.tsv"], "--valid 'dev.tsv' disagrees .* made with valid=None"),
        (["--set", "data.vocab_size=300"], "--set data.vocab_size 300 disagrees .* made with vocab_size=100"),
        (["--set", "data.use_cache=false"], "--set data.use_cache does not apply to the prepared corpus"),
    ],
)
def test_a_disagreeing_data_flag_is_refused_naming_the_folders_value(prep, tmp_path, capsys, flags, says):
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--data", str(prep), *flags, "--out", str(run), "--max-steps", "1",
                 "--no-progress"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert re.search(says, err), err
    assert not run.exists()


def test_agreeing_flags_and_other_corpora_pass(prep, tmp_path):
    check_prepared_overrides(prep, {"src_lang": "de", "tgt_lang": "en", "tokenizer": "auto", "max_len": None})
    check_prepared_overrides(prep, {"tokenizer": "bpe", "path": str(prep), "loader": "translation"})
    check_prepared_overrides(tmp_path / "train.tsv", {"max_len": 20})  # a raw corpus: the flag is used
    check_prepared_overrides(None, {"max_len": 20})


def _prepare_cli(folder, spec, *flags) -> dict:
    import json

    out = folder / "p"
    argv = ["prepare", "--data", spec, "--src-lang", "de", "--tgt-lang", "en", "--vocab-size", "100", "--workers", "1"]
    assert main([*argv, *flags, "--out", str(out)]) == 0
    return json.loads((out / "meta.json").read_text())


def test_prepare_holds_out_the_fractions_it_is_given(tmp_path, capsys):
    spec, _, _ = write_corpus(tmp_path, n=400)
    pairs = {}
    for valid, test in (("0.05", "0.05"), ("0.3", "0.2")):
        folder = tmp_path / f"{valid}-{test}"
        folder.mkdir()
        meta = _prepare_cli(folder, spec, "--valid-fraction", valid, "--test-fraction", test)
        pairs[valid, test] = {s: meta["splits"][s]["pairs"] for s in ("train", "valid", "test")}
    for (valid, test), n in pairs.items():
        total = sum(n.values())
        assert abs(n["valid"] / total - float(valid)) < 0.06 and abs(n["test"] / total - float(test)) < 0.06, pairs
    capsys.readouterr()


def test_prepare_normalizes_as_told(tmp_path, capsys):
    from attnlab.data import open_prepared

    spec, _, _ = write_corpus(tmp_path, n=60)
    de = tmp_path / "train.de"
    lines = de.read_text(encoding="utf-8").splitlines()
    de.write_text("\n".join(f"ﬁ {line}" if i % 2 else line for i, line in enumerate(lines)) + "\n", encoding="utf-8")
    encodings = {}
    for form in ("NFKC", "NFC"):
        folder = tmp_path / form
        folder.mkdir()
        _prepare_cli(folder, spec, "--normalization", form)
        vocab = open_prepared(folder / "p").src_vocab
        encodings[form] = (vocab.encode("ﬁ"), vocab.encode("fi"))
    assert encodings["NFKC"][0] == encodings["NFKC"][1]  # the ligature is the two letters
    assert encodings["NFC"][0] != encodings["NFC"][1]  # kept as written
    capsys.readouterr()
