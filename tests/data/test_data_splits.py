from collections import Counter

import pytest

from attnlab.data import Vocab, load_d2l_data, load_translation_data, preprocess, sample_data_path, tokenize


def test_full_corpus_splits_hold_out_sources(full_data):
    d = full_data
    assert d.stats["pairs_read"] == 167_130 and d.stats["malformed"] == 0
    assert len(d.train) + len(d.valid) + len(d.test) == 167_130
    assert len(d.test) >= round(0.05 * 167_130) and len(d.valid) >= round(0.05 * 167_130)

    def key(text):  # the sentence as its tokens, whitespace-normalized
        return " ".join(preprocess(text).split(" ")).strip()

    train_src = {key(e.src_text) for e in d.train}
    train_pairs = {(e.src_text, e.tgt_text) for e in d.train}
    assert len(train_src) < len(d.train)  # the corpus does repeat sources, so holding out matters
    for split in (d.valid, d.test):
        assert not any(key(e.src_text) in train_src for e in split)
        assert not any((e.src_text, e.tgt_text) in train_pairs for e in split)


def test_vocab_comes_from_train_only(full_data):
    d = full_data
    joined = preprocess("\n".join(e.tgt_text for e in d.train)).replace("\n", " ")
    counts = Counter(t for t in joined.split(" ") if t)
    assert d.tgt_vocab == Vocab.from_counts(counts, min_freq=2, lang="fr")
    # Examples are encoded with that vocabulary, raw texts kept as in the file.
    e = d.train[0]
    assert e.src_ids == d.src_vocab.encode(e.src_text) and e.tgt_ids == d.tgt_vocab.encode(e.tgt_text)


def test_second_load_hits_the_tokenized_cache(full_data, corpus_path):
    again = load_translation_data(corpus_path)
    assert again.stats["tokenized_cache_hit"]
    assert again.src_vocab == full_data.src_vocab and again.test == full_data.test


def test_seeded_and_sized(corpus_path):
    a = load_translation_data(corpus_path, num_examples=3000, max_len=5, seed=1)
    b = load_translation_data(corpus_path, num_examples=3000, max_len=5, seed=1)
    assert a.test == b.test and a.train == b.train
    assert a.stats["pairs_used"] == 3000 and a.stats["dropped_by_max_len"] > 0
    for e in a.train + a.valid + a.test:
        assert len(e.src_ids) <= 5 and len(e.tgt_ids) <= 5


def test_without_holdout_pairs_still_disjoint(corpus_path):
    d = load_translation_data(corpus_path, num_examples=2000, holdout_duplicates=False, seed=2)
    train = {id(e) for e in d.train}
    assert not any(id(e) in train for e in d.test)
    assert len(d.train) + len(d.valid) + len(d.test) == 2000
    other = load_translation_data(corpus_path, num_examples=2000, holdout_duplicates=False, seed=3)
    assert d.test != other.test


def test_d2l_preset_shapes(corpus_path):
    d = load_d2l_data(corpus_path)
    assert len(d.train) == 600 and d.valid == [] and d.test[0].src_text == "go ."
    batches = list(d.batches())
    assert sum(len(b) for b in batches) == 600
    assert all(b.src.shape == (64, 10) == b.tgt_in.shape == b.tgt_out.shape for b in batches if len(b) == 64)
    assert sorted(len(b) for b in batches) == [24] + [64] * 9
    b = batches[0]
    assert (b.tgt_in[:, 0] == d.tgt_vocab.bos).all()
    assert (b.src_valid_lens == (b.src != d.src_vocab.pad).sum(1)).all()  # the book's valid_len


def test_bpe_on_the_sample():
    d = load_translation_data(
        sample_data_path(), tokenizer="bpe", bpe_vocab_size=150, min_freq=1, valid_fraction=0.1, test_fraction=0.1
    )
    assert d.src_vocab.tokenizer is d.tgt_vocab.tokenizer  # one shared vocabulary
    e = d.train[0]
    assert d.tgt_vocab.decode(e.tgt_ids) == " ".join(tokenize(e.tgt_text)).replace(" .", ".")


def test_bad_arguments():
    with pytest.raises(ValueError, match="tokenizer"):
        load_translation_data(sample_data_path(), tokenizer="chars")
    with pytest.raises(ValueError, match="max_len"):
        load_translation_data(sample_data_path(), max_len=1)
