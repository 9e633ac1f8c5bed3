"""A prepared folder carries a manifest; a truncated, padded or altered file is one line naming it."""

import json
import shutil

import numpy as np
import pytest
from test_prepared_shards import write_corpus  # tests/data/prepared is on sys.path (no __init__)

from attnlab.data import open_prepared, prepare
from attnlab.data.prepared import load_parallel_data, manifest


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("manifest")
    spec, _, _ = write_corpus(folder, n=200)
    prepare(spec, folder / "prep", src_lang="de", tgt_lang="en", vocab_size=100, shard_size=64, log=lambda line: None)
    return folder / "prep"


@pytest.fixture
def prep(pristine, tmp_path):
    shutil.copytree(pristine, tmp_path / "prep")
    return tmp_path / "prep"


def _flip(path, at=0):
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_prepare_writes_a_manifest_of_every_file(prep):
    m = json.loads((prep / "manifest.json").read_text())
    assert set(m["files"]) == {p.name for p in prep.iterdir()} - {"manifest.json"}
    assert m["files"]["train-00000.src"]["size"] == (prep / "train-00000.src").stat().st_size
    meta = json.loads((prep / "meta.json").read_text())
    assert m["pairs"] == {s: meta["splits"][s]["pairs"] for s in ("train", "valid", "test")}
    open_prepared(prep)  # intact: opens


@pytest.mark.parametrize(("damage", "says"), [("truncate", "truncated"), ("pad", "padded")])
def test_a_resized_shard_is_one_line_naming_it(prep, damage, says):
    shard = prep / "train-00001.src"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 3] if damage == "truncate" else data + b"\0" * 64)
    with pytest.raises(
        ValueError, match=rf"train-00001.src has \d+ bytes but manifest.json says {len(data)} \({says}\)"
    ):
        open_prepared(prep)


def test_an_altered_file_is_caught_by_its_sha256(prep):
    _flip(prep / "train-00000.tgt", at=3)
    with pytest.raises(ValueError, match=r"train-00000.tgt does not match its sha256 .*re-run `attnlab prepare`"):
        open_prepared(prep)


def test_a_large_folder_hashes_all_but_the_training_tokens_unless_asked(prep, monkeypatch):
    monkeypatch.setattr(manifest, "FULL_CHECK_BYTES", 0)  # every folder counts as large
    _flip(prep / "train-00000.src", at=1)
    open_prepared(prep)  # the bulk is checked by size only
    with pytest.raises(ValueError, match=r"train-00000\.src does not match its sha256"):
        open_prepared(prep, full_check=True)
    lens = np.load(prep / "train-00001.len.npy")
    lens[0, 0] += 1
    np.save(prep / "train-00001.len.npy", lens)  # the lengths index is always hashed: it drives batching
    with pytest.raises(ValueError, match=r"train-00001\.len\.npy does not match its sha256"):
        open_prepared(prep)


def test_a_missing_file_or_manifest(prep):
    (prep / "test.tsv").unlink()
    with pytest.raises(ValueError, match=r"test.tsv is missing \(listed in manifest.json\)"):
        open_prepared(prep)
    (prep / "manifest.json").unlink()
    with pytest.raises(ValueError, match=r"manifest\.json is missing, so the shards cannot be checked"):
        open_prepared(prep)


def test_train_on_a_damaged_folder_is_one_line_and_exit_2(prep, tmp_path, capsys):
    from attnlab.cli import main

    shard = prep / "train-00000.src"
    shard.write_bytes(shard.read_bytes()[:10])
    argv = ["train", "--preset", "tiny", "--data", str(prep), "--out", str(tmp_path / "run"), "--max-steps", "1"]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train-00000.src has 10 bytes" in err and "re-run `attnlab prepare`" in err


def test_a_damaged_cached_preparation_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec, _, _ = write_corpus(tmp_path, n=60)
    opts = {"path": spec, "src_lang": "de", "tgt_lang": "en", "vocab_size": 100}
    first = load_parallel_data(opts)
    cached = next((tmp_path / "cache").rglob("train-00000.src"))
    cached.write_bytes(b"")
    with pytest.warns(UserWarning, match="rebuilding the prepared cache"):
        again = load_parallel_data(opts)
    assert again.settings["cache"] == first.settings["cache"] and len(again.train) == len(first.train)
    assert [again.train[i].src_ids for i in range(5)] == [first.train[i].src_ids for i in range(5)]
