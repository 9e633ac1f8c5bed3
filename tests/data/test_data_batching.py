import numpy as np
import pytest
import torch

from attnlab.data import Example, Vocab, collate, iterate_batches, plan_batches
from attnlab.data.batching import count_batches, plan_lengths


def make_examples(n=500, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, 30, (n, 2), generator=g).tolist()
    return [Example([4 + (i % 5)] * s, [5 + (i % 3)] * t, f"s{i}", f"t{i}") for i, (s, t) in enumerate(lens)]


@pytest.fixture(scope="module")
def vocab():
    return Vocab([str(i) for i in range(20)] * 2)


def check_batch(b, vocab, examples):
    """Every padded position lies past its row's valid length, and rows hold x + <eos>, y + <eos>."""
    for name, lens in (("src", b.src_valid_lens), ("tgt_out", b.tgt_valid_lens)):
        x = getattr(b, name)
        positions = torch.arange(x.shape[1])
        assert ((x == vocab.pad) == (positions >= lens[:, None])).all(), name
    for row, i in enumerate(b.indices.tolist()):
        e = examples[i]
        assert b.src[row, : len(e.src_ids) + 1].tolist() == e.src_ids + [vocab.eos]
        assert b.tgt_out[row, : len(e.tgt_ids) + 1].tolist() == e.tgt_ids + [vocab.eos]
        assert b.tgt_in[row, : len(e.tgt_ids) + 1].tolist() == [vocab.bos] + e.tgt_ids
    assert b.num_tokens == sum(len(examples[i].tgt_ids) + 1 for i in b.indices.tolist())


def test_token_budget_and_padding(vocab):
    ex = make_examples()
    seen = []
    for b in iterate_batches(ex, vocab, vocab, batch_tokens=200):
        assert max(b.src.shape[1], b.tgt_out.shape[1]) * len(b) <= 200
        check_batch(b, vocab, ex)
        seen += b.indices.tolist()
    assert sorted(seen) == list(range(len(ex)))  # each example exactly once per epoch


def test_oversized_example_goes_alone(vocab):
    ex = make_examples(50) + [Example([4] * 100, [5] * 3, "long", "x")]
    plan = plan_batches(ex, batch_tokens=60)
    assert [50] in plan
    assert all(len(p) == 1 or 50 not in p for p in plan)


def test_batch_size_limit(vocab):
    plan = plan_batches(make_examples(), batch_size=32)
    assert max(map(len, plan)) == 32 and sum(map(len, plan)) == 500


def test_deterministic_per_seed_and_epoch():
    ex = make_examples()
    assert plan_batches(ex, batch_tokens=300, epoch=1) == plan_batches(ex, batch_tokens=300, epoch=1)
    assert plan_batches(ex, batch_tokens=300, epoch=1) != plan_batches(ex, batch_tokens=300, epoch=2)
    assert plan_batches(ex, batch_tokens=300, seed=1) != plan_batches(ex, batch_tokens=300, seed=2)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ddp_shards_disjoint_and_equal(world_size):
    ex = make_examples()
    full = plan_batches(ex, batch_tokens=300, epoch=3)
    shards = [plan_batches(ex, batch_tokens=300, epoch=3, rank=r, world_size=world_size) for r in range(world_size)]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == len(full) // world_size
    flat = [i for s in shards for b in s for i in b]
    assert len(flat) == len(set(flat))
    with pytest.raises(ValueError, match="rank"):
        plan_batches(ex, batch_tokens=300, rank=world_size, world_size=world_size)


def test_fixed_num_steps_matches_truncate_pad(vocab):
    ex = [Example([4, 5, 6], [7, 8], "a", "b"), Example([4] * 12, [5] * 12, "long", "long")]
    b = collate(ex, [0, 1], vocab, vocab, num_steps=5)
    assert b.src.tolist() == [[4, 5, 6, vocab.eos, vocab.pad], [4] * 5]  # long row loses <eos>
    assert b.tgt_out.tolist() == [[7, 8, vocab.eos, vocab.pad, vocab.pad], [5] * 5]
    assert b.tgt_in.tolist() == [[vocab.bos, 7, 8, vocab.eos, vocab.pad], [vocab.bos] + [5] * 4]
    assert b.src_valid_lens.tolist() == [4, 5] and b.tgt_valid_lens.tolist() == [3, 5]


def test_batch_to_and_len(vocab):
    b = collate(make_examples(4), [0, 1, 2], vocab, vocab)
    moved = b.to("cpu")
    assert len(moved) == 3 and moved.src.dtype == torch.long and torch.equal(moved.src, b.src)


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_tokens"):
        plan_batches(make_examples(5))


def greedy_reference(lengths, batch_tokens, batch_size, shuffle, rng):
    """The cut one example at a time, as a list of lists (what a BatchPlan must equal)."""
    if shuffle:
        perm = rng.permutation(len(lengths))
        order = perm[np.argsort(lengths[perm], kind="stable")]
    else:
        order = np.argsort(lengths, kind="stable")
    batches, current = [], []
    for i in order.tolist():
        n = int(lengths[i])
        too_many = batch_size is not None and len(current) + 1 > batch_size
        if current and ((batch_tokens is not None and n * (len(current) + 1) > batch_tokens) or too_many):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return [batches[j] for j in rng.permutation(len(batches)).tolist()] if shuffle else batches


@pytest.mark.parametrize("batch_tokens,batch_size", [(64, None), (7, None), (None, 5), (100, 3), (1000, 64)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_plan_equals_the_cut_one_example_at_a_time(batch_tokens, batch_size, shuffle):
    lengths = np.random.default_rng(0).integers(1, 40, 3000)  # some longer than 7 tokens: they go alone
    kwargs = dict(batch_tokens=batch_tokens, batch_size=batch_size, shuffle=shuffle)
    plan = plan_lengths(lengths, **kwargs, rng=np.random.default_rng(4), offset=10)
    expected = greedy_reference(lengths, batch_tokens, batch_size, shuffle, np.random.default_rng(4))
    assert list(plan) == [[i + 10 for i in b] for b in expected]
    assert count_batches(lengths, batch_tokens=batch_tokens, batch_size=batch_size) == len(expected)
    assert list(plan[5:9]) == list(plan)[5:9] and plan[-1] == list(plan)[-1]
    assert plan.nbytes() <= 4 * len(lengths) + 16 * (len(plan) + 1)  # int32 order; int64 bounds, batch order
