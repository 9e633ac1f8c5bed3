"""Memory that must not grow with the corpus: epoch plans and held-out splits of prepared corpora hold
integer arrays, never one Python object per pair (counted with tracemalloc at two corpus sizes)."""

import random
import tracemalloc

import numpy as np
import pytest
from test_data_batching import greedy_reference

from attnlab.data import open_prepared, plan_batches, prepare
from attnlab.data.prepared.reader import HeldOutExamples, ShardedExamples


def write_corpus(folder, n: int, seed: int) -> str:
    """n aligned pairs of 2-6 made-up words (the target: each word reversed), as `folder`/c.de, c.en.
    40 words, so that every size has the same vocabulary."""
    rng = random.Random(seed)
    words = ["".join(random.Random(i).choices("abcdefghij", k=2 + i % 5)) for i in range(40)]
    src = [" ".join(rng.choices(words, k=rng.randint(2, 6))) for _ in range(n)]
    (folder / "c.de").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (folder / "c.en").write_text("".join(" ".join(w[::-1] for w in s.split()) + "\n" for s in src), encoding="utf-8")
    return f"{folder / 'c.de'},{folder / 'c.en'}"


def lengths_index(folder, pairs_per_shard: list[int], seed=0) -> ShardedExamples:
    """A training split of synthetic lengths only (what planning reads), shards of the given sizes."""
    rng = np.random.default_rng(seed)
    shards = []
    for k, n in enumerate(pairs_per_shard):
        name = f"train-{k:05d}"
        np.save(folder / f"{name}.len.npy", rng.integers(3, 40, (n, 2)).astype(np.int32))
        shards.append({"name": name, "pairs": n})
    return ShardedExamples(folder, shards, "uint16", None, None)


def traced(fn):
    """(live blocks fn left behind, bytes at the traced peak) of calling fn; fn's result is kept alive."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = fn()
    after = tracemalloc.take_snapshot()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    blocks = sum(s.count_diff for s in after.compare_to(before, "filename"))
    del kept
    return blocks, peak


def planned_mid_shard(data: ShardedExamples):
    """An epoch planned, counted, and its iterator stopped inside the first shard (as training holds it)."""
    plan = plan_batches(data, batch_tokens=256, seed=1, epoch=2)
    assert len(plan) > 0
    it = iter(plan)
    next(it)
    return plan, it


def test_a_shards_plan_holds_no_python_object_per_pair(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    small, large = lengths_index(tmp_path / "a", [20_000]), lengths_index(tmp_path / "b", [200_000])
    (blocks_small, _), (blocks_large, peak_large) = (
        traced(lambda: planned_mid_shard(small)),
        traced(lambda: planned_mid_shard(large)),
    )
    # A list of index lists would leave ~one int object per pair: 180,000 more blocks for the large shard.
    assert blocks_large - blocks_small < 100, (blocks_small, blocks_large)
    assert peak_large < 50 * 200_000  # the argsort and plan arrays: a few int64 per pair, not Python lists


def test_planning_memory_is_flat_in_the_number_of_shards(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    small, large = lengths_index(tmp_path / "a", [5_000] * 4), lengths_index(tmp_path / "b", [5_000] * 40)

    def whole_epoch(data):
        plan = plan_batches(data, batch_tokens=256, seed=0, epoch=0)
        return sum(len(b) for b in plan), len(plan)

    (_, peak_small), (_, peak_large) = traced(lambda: whole_epoch(small)), traced(lambda: whole_epoch(large))
    assert whole_epoch(large)[0] == 200_000
    # One plan for the whole corpus would add >= 12 bytes per pair (an int32 order, its int64 argsort).
    assert peak_large - peak_small < 180_000, (peak_small, peak_large)


def test_an_epoch_of_shards_gives_the_batches_of_the_cut_one_example_at_a_time(tmp_path):
    data = lengths_index(tmp_path, [300, 500, 200], seed=5)
    expected = []
    for k in np.random.default_rng([3, 1, 1]).permutation(3).tolist():  # the (seed, epoch) shard order
        padded = np.load(tmp_path / f"train-{k:05d}.len.npy").max(axis=1) + 1
        cut = greedy_reference(padded, 64, None, True, np.random.default_rng([3, 1, 2, k]))
        expected += [[int(data.starts[k]) + i for i in b] for b in cut]
    plan = plan_batches(data, batch_tokens=64, seed=3, epoch=1)
    assert list(plan) == expected and len(plan) == len(expected)


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory):
    """The same kind of corpus prepared at 2,000 and 20,000 pairs, 45% valid and 45% test (word vocab)."""
    folders = []
    for n in (2_000, 20_000):
        folder = tmp_path_factory.mktemp(f"heldout{n}")
        spec = write_corpus(folder, n=n, seed=n)
        prepare(
            spec,
            folder / "prep",
            src_lang="de",
            tgt_lang="en",
            tokenizer="word",
            valid_fraction=0.45,
            test_fraction=0.45,
            workers=1,
        )
        folders.append(folder / "prep")
    return folders


def test_held_out_splits_are_lazy_and_read_what_prepare_wrote(two_sizes):
    (blocks_small, _), (blocks_large, _) = (traced(lambda f=f: open_prepared(f)) for f in two_sizes)
    # Lists of Examples would leave ~7 objects per held-out pair: over 100,000 more at 20,000 pairs.
    assert blocks_large - blocks_small < 100, (blocks_small, blocks_large)
    data = open_prepared(two_sizes[1])
    assert len(data.valid) > 8_000 and len(data.test) > 8_000
    lines = (two_sizes[1] / "valid.tsv").read_text(encoding="utf-8").splitlines()
    assert [(e.src_text, e.tgt_text) for e in data.valid] == [tuple(line.split("\t", 1)) for line in lines]
    for e in data.valid[:50] + [data.valid[-1]]:  # ids are the vocabulary's encoding of the raw text
        assert e.src_ids == data.src_vocab.encode(e.src_text) and e.tgt_ids == data.tgt_vocab.encode(e.tgt_text)


def test_a_held_out_text_file_out_of_step_with_its_shards_is_one_clear_error(two_sizes, tmp_path):
    data = open_prepared(two_sizes[0])
    short = tmp_path / "test.tsv"  # (the manifest refuses such a file in a folder; this is the reader's own check)
    short.write_text("".join((two_sizes[0] / "test.tsv").read_text(encoding="utf-8").splitlines(True)[:-1]))
    with pytest.raises(ValueError, match=r"test\.tsv has \d+ lines for \d+ pairs.*prepare the corpus again"):
        HeldOutExamples(data.test.ids, short)
