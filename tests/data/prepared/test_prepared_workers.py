"""`prepare` with an encoding pool: the same shards for any number of workers, chunk and shard
boundaries anywhere, the format each pair's own encoding gives, and clear errors for bad --workers."""

import json
import random

import numpy as np
import pytest
from test_prepared_shards import write_corpus  # tests/data/prepared is on sys.path (no __init__)

from attnlab.data import open_prepared, prepare


def _files(folder):
    """Every file's bytes; meta.json without the timing (the only part allowed to differ), so also the
    manifest without meta.json's sha256 and size (the timing's digits vary)."""
    out = {}
    for p in sorted(folder.iterdir()):
        if p.name == "meta.json":
            meta = json.loads(p.read_text())
            meta.pop("seconds")
            out[p.name] = meta
        elif p.name == "manifest.json":
            manifest = json.loads(p.read_text())
            manifest["files"].pop("meta.json")
            out[p.name] = manifest
        else:
            out[p.name] = p.read_bytes()
    return out


@pytest.fixture
def small_chunks(monkeypatch):
    # 37-pair chunks: a 300-pair corpus spans 9 chunks, so the pool starts and chunk edges fall
    # inside shards (shard_size 50) and inside the random split's runs.
    monkeypatch.setattr("attnlab.data.prepared.pipeline._CHUNK", 37)


def test_one_and_two_workers_write_identical_shards(tmp_path, small_chunks, monkeypatch):
    from attnlab.data.prepared.encoders import ChunkEncoder

    submitted = []  # chunks sent to the pool: the two-worker run must really use it
    submit = ChunkEncoder._submit
    monkeypatch.setattr(ChunkEncoder, "_submit", lambda self, *a: submitted.append(1) or submit(self, *a))
    spec, _, _ = write_corpus(tmp_path, n=300)
    opts = dict(src_lang="de", tgt_lang="en", vocab_size=120, shard_size=50, max_len=6, log=lambda line: None)
    metas = [prepare(spec, tmp_path / f"w{w}", workers=w, **opts) for w in (1, 2)]
    assert len(submitted) >= 6  # every chunk after the first (none with one worker)
    assert metas[0]["splits"]["train"]["pairs"] > 100 and len(metas[0]["splits"]["train"]["shards"]) >= 3
    assert sum(f["counts"].get("over-long (> 6 tokens)", 0) for f in metas[0]["reports"]["data"]["files"]) > 0
    assert _files(tmp_path / "w1") == _files(tmp_path / "w2")


def test_word_tokenizer_pool_matches_in_process(tmp_path, small_chunks):
    """The book's word rules (en-fr) in worker processes give the same shards as in this one."""
    rng = random.Random(0)
    words = [("the cat", "le chat"), ("is big", "est grand"), ("I'm", "je suis"), ("tired.", "fatigué.")]
    pairs = [[rng.choice(words) for _ in range(rng.randint(1, 4))] for _ in range(120)]
    (tmp_path / "a.en").write_text("\n".join(" ".join(w[0] for w in p) for p in pairs) + "\n", encoding="utf-8")
    (tmp_path / "a.fr").write_text("\n".join(" ".join(w[1] for w in p) for p in pairs) + "\n", encoding="utf-8")
    spec = f"{tmp_path / 'a.en'},{tmp_path / 'a.fr'}"
    opts = dict(src_lang="en", tgt_lang="fr", min_freq=1, shard_size=40, log=lambda line: None)
    for w in (1, 2):
        prepare(spec, tmp_path / f"w{w}", workers=w, **opts)
    assert json.loads((tmp_path / "w1" / "meta.json").read_text())["settings"]["tokenizer"] == "word"
    assert _files(tmp_path / "w1") == _files(tmp_path / "w2")


def test_shards_hold_each_pairs_own_encoding_in_order(tmp_path, small_chunks):
    """The format, pair by pair: what a one-pair-at-a-time writer would have written."""
    spec, de, en = write_corpus(tmp_path, n=130)
    vspec, _, _ = write_corpus(tmp_path, n=10, seed=1, name="dev")
    tspec, _, _ = write_corpus(tmp_path, n=10, seed=2, name="test")
    meta = prepare(spec, tmp_path / "p", src_lang="de", tgt_lang="en", valid=vspec, test=tspec, vocab_size=120,
                   shard_size=45, workers=2, log=lambda line: None)  # fmt: skip
    data = open_prepared(tmp_path / "p")
    dtype = np.dtype(meta["dtype"])
    shards = meta["splits"]["train"]["shards"]
    assert [s["pairs"] for s in shards] == [45, 45, 40]
    src = [data.src_vocab.encode(s) for s in de]
    tgt = [data.tgt_vocab.encode(t) for t in en]
    for k, shard in enumerate(shards):
        rows = range(45 * k, 45 * k + shard["pairs"])
        expect_src = np.concatenate([np.asarray(src[i], dtype) for i in rows]).tobytes()
        expect_tgt = np.concatenate([np.asarray(tgt[i], dtype) for i in rows]).tobytes()
        assert (tmp_path / "p" / f"{shard['name']}.src").read_bytes() == expect_src
        assert (tmp_path / "p" / f"{shard['name']}.tgt").read_bytes() == expect_tgt
        lens = np.load(tmp_path / "p" / f"{shard['name']}.len.npy")
        assert lens.dtype == np.int32 and lens.tolist() == [[len(src[i]), len(tgt[i])] for i in rows]
    assert (tmp_path / "p" / "valid.tsv").read_text(encoding="utf-8").count("\n") == 10


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_bad_workers_are_refused(tmp_path, bad):
    spec, _, _ = write_corpus(tmp_path, n=10)
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        prepare(spec, tmp_path / "p", src_lang="de", tgt_lang="en", workers=bad)
    assert not (tmp_path / "p").exists()


def test_cli_workers_flag(tmp_path, capsys):
    from attnlab.cli import main

    spec, _, _ = write_corpus(tmp_path, n=40)
    args = ["prepare", "--data", spec, "--src-lang", "de", "--tgt-lang", "en", "--vocab-size", "100"]
    assert main([*args, "--workers", "0", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert "workers must be a positive integer" in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        main([*args, "--workers", "two", "--out", str(tmp_path / "a")])
    assert exc.value.code == 2
    capsys.readouterr()
    assert main([*args, "--workers", "1", "--out", str(tmp_path / "b")]) == 0
    assert "pairs/s" in capsys.readouterr().out


def test_a_worker_that_dies_fails_the_map_at_once(monkeypatch):
    """A worker killed mid-chunk (the OOM killer, say) is noticed: the map raises BrokenProcessPool within
    seconds, and leaving the block reaps the other worker."""
    import os
    import time
    from concurrent.futures.process import BrokenProcessPool

    from attnlab.data.prepared import encoders
    from attnlab.data.vocab import Vocab

    vocab = Vocab("a b c".split())
    monkeypatch.setattr(encoders, "_work", lambda sources, targets: os._exit(9))  # read by the forked workers
    local = (lambda texts: [vocab.encode(t) for t in texts],) * 2
    enc = encoders.ChunkEncoder(local, encoders.spec_of("word", vocab, vocab), np.uint16, workers=2)
    chunks = [(i, ["a b"], ["c"]) for i in range(5)]
    t0 = time.monotonic()
    with pytest.raises(BrokenProcessPool, match="exit code 9"), enc:
        list(enc.map(chunks))
    assert time.monotonic() - t0 < 20
    assert not enc._workers  # reaped: nothing left to wait on


def test_cli_a_killed_worker_is_one_line_and_nothing_is_written(tmp_path, small_chunks, monkeypatch, capsys):
    """`attnlab prepare` whose worker is killed from outside says so in one line (no traceback), exit 1,
    and leaves no --out behind."""
    import os

    from attnlab.cli import main
    from attnlab.data.prepared import encoders

    monkeypatch.setattr(encoders, "_work", lambda sources, targets: os._exit(9))  # read by the forked workers
    spec, _, _ = write_corpus(tmp_path, n=300)
    out = tmp_path / "p"
    args = ["prepare", "--data", spec, "--src-lang", "de", "--tgt-lang", "en", "--vocab-size", "100"]
    assert main([*args, "--workers", "2", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "died" in err and "--workers 1" in err, err
    assert not out.exists()
