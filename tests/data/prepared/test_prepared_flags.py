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
