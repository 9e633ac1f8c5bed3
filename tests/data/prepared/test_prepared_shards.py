"""Prepared shards: round trip, lazy batching from the lengths index, DDP shard split, prepare -> train."""

import gzip
import json
import random

import numpy as np
import pytest

from attnlab.data import collate, open_prepared, plan_batches, prepare
from attnlab.data.prepared import load_parallel_data

_DE_EN = {
    "haus": "house",
    "katze": "cat",
    "hund": "dog",
    "baum": "tree",
    "straße": "street",
    "grün": "green",
    "groß": "big",
    "klein": "small",
    "müde": "tired",
    "ﬁsch": "fish",
}  # 'ﬁ' ligature: NFKC -> 'fi'


def write_corpus(folder, n=300, seed=0, name="train"):
    """A tiny German-English corpus made here: `name`.de and `name`.en.gz, aligned."""
    rng = random.Random(seed)
    de, en = [], []
    for _ in range(n):
        ws = rng.choices(list(_DE_EN), k=rng.randint(2, 6))
        de.append(" ".join(ws).capitalize() + ".")
        en.append(" ".join(_DE_EN[w] for w in ws).capitalize() + ".")
    (folder / f"{name}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    with gzip.open(folder / f"{name}.en.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(en) + "\n")
    return f"{folder / (name + '.de')},{folder / (name + '.en.gz')}", de, en


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    spec, de, en = write_corpus(folder, n=300)
    out = folder / "prep"
    meta = prepare(
        spec, out, src_lang="de", tgt_lang="en", vocab_size=120, shard_size=64, valid_fraction=0.1, test_fraction=0.1
    )
    return out, meta, de, en


def test_round_trip_ids_texts_and_normalization(prepared):
    out, meta, de, en = prepared
    data = open_prepared(out)
    assert data.src_vocab.style == "plain" and data.src_vocab.lang == "de" and data.tgt_vocab.lang == "en"
    n = len(data.train) + len(data.valid) + len(data.test)
    assert n == 300 and len(data.valid) > 0 and len(data.test) > 0
    assert meta["dtype"] == "uint16" and len(meta["splits"]["train"]["shards"]) == -(-len(data.train) // 64)
    # Training examples hold exactly what the vocabulary encodes for the pair they came from.
    train_pairs = [(s, t) for s, t in zip(de, en)]
    encoded = {(tuple(data.src_vocab.encode(s)), tuple(data.tgt_vocab.encode(t))) for s, t in train_pairs}
    for i in (0, 63, 64, len(data.train) - 1):
        ex = data.train[i]
        assert (tuple(ex.src_ids), tuple(ex.tgt_ids)) in encoded
    # Held-out splits keep their raw texts (the BLEU references); the ligature is normalized away.
    assert all((e.src_text, e.tgt_text) in set(train_pairs) for e in data.test)
    assert data.src_vocab.decode(data.src_vocab.encode("Der ﬁsch.")) == "Der fisch."
    # The same source sentence never lands in two splits.
    train_src = {data.train[i].src_text for i in range(len(data.train))}
    assert not any(e.src_text in train_src for e in [*data.valid, *data.test])


def test_plan_from_lengths_covers_each_example_once(prepared):
    data = open_prepared(prepared[0])
    plan = plan_batches(data.train, batch_tokens=64, seed=3, epoch=1)
    batches = list(plan)
    assert len(batches) == len(plan)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(data.train)))
    for b in batches:  # the padded-token budget holds, as for in-memory lists
        longest = max(max(len(data.train[i].src_ids), len(data.train[i].tgt_ids)) + 1 for i in b)
        assert longest * len(b) <= 64 or len(b) == 1
    assert [list(b) for b in plan_batches(data.train, batch_tokens=64, seed=3, epoch=1)] == batches  # seeded
    assert list(plan_batches(data.train, batch_tokens=64, seed=3, epoch=2)) != batches
    batch = collate(data.train, batches[0], data.src_vocab, data.tgt_vocab)
    assert batch.src.shape[0] == len(batches[0]) and int(batch.src_valid_lens.max()) == batch.src.shape[1]
    assert list(plan[1:3]) == batches[1:3]  # a resumed epoch starts mid-plan


def test_ddp_ranks_read_disjoint_shards_and_run_equal_steps(prepared):
    data = open_prepared(prepared[0])
    shard_of = np.searchsorted(data.train.starts, np.arange(len(data.train)), side="right") - 1
    plans = [plan_batches(data.train, batch_tokens=64, seed=0, epoch=0, rank=r, world_size=2) for r in (0, 1)]
    assert len(plans[0]) == len(plans[1]) > 0
    shards = [{int(shard_of[i]) for b in p for i in b} for p in plans]
    assert shards[0] and shards[1] and not shards[0] & shards[1]
    # More ranks than shards: every rank plans all shards and takes every W-th batch.
    many = [list(plan_batches(data.train, batch_tokens=64, rank=r, world_size=8)) for r in range(8)]
    seen = [i for p in many for b in p for i in b]
    assert len(seen) == len(set(seen)) and len({len(p) for p in many}) == 1


def test_prepare_refuses_existing_folder_and_leaves_nothing_on_error(tmp_path):
    spec, _, _ = write_corpus(tmp_path, n=20)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        prepare(spec, tmp_path / "busy", src_lang="de", tgt_lang="en")
    (tmp_path / "short.en").write_text("one\n")
    with pytest.raises(ValueError, match="misaligned"):
        prepare(f"{tmp_path / 'train.de'},{tmp_path / 'short.en'}", tmp_path / "out", src_lang="de", tgt_lang="en")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))
    with pytest.raises(ValueError, match="--valid and --test"):
        prepare(spec, tmp_path / "out", src_lang="de", tgt_lang="en", valid=spec)
    with pytest.raises(ValueError, match="src_lang must be a language code"):
        prepare(spec, tmp_path / "out", src_lang="", tgt_lang="en")


def test_over_long_pairs_are_reported_by_token_count(tmp_path):
    spec, _, _ = write_corpus(tmp_path, n=50)
    meta = prepare(
        spec,
        tmp_path / "p",
        src_lang="de",
        tgt_lang="en",
        max_len=5,
        vocab_size=120,
        valid_fraction=0.0,
        test_fraction=0.0,
        log=lambda line: None,
    )
    files = meta["reports"]["data"]["files"]
    skipped = sum(f["counts"].get("over-long (> 5 tokens)", 0) for f in files)
    assert skipped > 0 and meta["splits"]["train"]["pairs"] < 50
    assert files[0]["first_lines"]["over-long (> 5 tokens)"][0] >= 1


def test_en_fr_files_keep_the_book_rules_and_raw_corpora_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "a.en").write_text("Go.\nI lost.\nHe's calm.\nGo.\n", encoding="utf-8")
    (tmp_path / "a.fr").write_text("Va !\nJ'ai perdu.\nIl est calme.\nBouge !\n", encoding="utf-8")
    opts = {
        "path": f"{tmp_path / 'a.en'},{tmp_path / 'a.fr'}",
        "src_lang": "en",
        "tgt_lang": "fr",
        "min_freq": 1,
        "valid_fraction": 0.0,
        "test_fraction": 0.0,
    }
    data = load_parallel_data(opts)
    assert data.src_vocab.kind == "word" and "calm" in data.src_vocab and "!" in data.tgt_vocab
    again = load_parallel_data(opts)
    assert again.settings["cache"] == data.settings["cache"] and again.src_vocab == data.src_vocab


def test_prepare_train_evaluate_end_to_end(tmp_path, capsys):
    from attnlab.cli import main

    spec, _, _ = write_corpus(tmp_path, n=200)
    vspec, _, _ = write_corpus(tmp_path, n=20, seed=1, name="dev")
    tspec, _, _ = write_corpus(tmp_path, n=20, seed=2, name="test")
    assert (
        main(
            [
                "prepare",
                "--data",
                spec,
                "--valid",
                vspec,
                "--test",
                tspec,
                "--src-lang",
                "de",
                "--tgt-lang",
                "en",
                "--vocab-size",
                "100",
                "--shard-size",
                "50",
                "--out",
                str(tmp_path / "prep"),
            ]
        )
        == 0
    )
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--preset",
                "tiny",
                "--data",
                str(tmp_path / "prep"),
                "--out",
                str(run),
                "--max-steps",
                "4",
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((run / "config.json").read_text())["data"]["path"] == str(tmp_path / "prep")
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(run), "--beam", "1", "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "test split, 5 distinct sources" in out and "BLEU" in out and "book's sentences" not in out
    assert (
        main(
            [
                "train",
                "--data",
                "nope.de,nope.en",
                "--src-lang",
                "de",
                "--tgt-lang",
                "en",
                "--out",
                str(tmp_path / "r2"),
            ]
        )
        == 2
    )
    assert "does not exist" in capsys.readouterr().err
