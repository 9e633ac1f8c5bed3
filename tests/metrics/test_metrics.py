"""The book's BLEU (hand-computed values, parity with the book's code) and sacreBLEU corpus scores."""

import collections
import math
import random

import pytest

from attnlab.metrics import bleu, corpus_bleu, corpus_chrf


def book_bleu(pred_seq, label_seq, k):
    """Verbatim from *Dive into Deep Learning* (section 10.7 / 9.7), for parity."""
    pred_tokens, label_tokens = pred_seq.split(" "), label_seq.split(" ")
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    score = math.exp(min(0, 1 - len_label / len_pred))
    for n in range(1, k + 1):
        num_matches, label_subs = 0, collections.defaultdict(int)
        for i in range(len_label - n + 1):
            label_subs[" ".join(label_tokens[i : i + n])] += 1
        for i in range(len_pred - n + 1):
            if label_subs[" ".join(pred_tokens[i : i + n])] > 0:
                num_matches += 1
                label_subs[" ".join(pred_tokens[i : i + n])] -= 1
        score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


@pytest.mark.parametrize(
    "pred, label, k, expected",
    [
        ("il est calme .", "il est calme .", 2, 1.0),
        ("va !", "va !", 2, 1.0),
        # The book's printed example: 3/4 unigrams, 1/3 bigrams -> 0.75**0.5 * (1/3)**0.25 = 0.658
        ("il est riche .", "il est calme .", 2, 0.75**0.5 * (1 / 3) ** 0.25),
        # Short prediction: brevity penalty exp(1 - 5/3), unigrams 3/3, bigrams 1/2.
        ("je suis .", "je suis chez moi .", 2, math.exp(1 - 5 / 3) * 0.5**0.25),
        # Clipping: "the" counts once, as often as the label has it.
        ("the the the", "the cat", 1, (1 / 3) ** 0.5),
    ],
)
def test_bleu_hand_computed(pred, label, k, expected):
    assert bleu(pred, label, k) == pytest.approx(expected, abs=1e-12)


def test_bleu_matches_book_code_when_prediction_is_long_enough():
    rng = random.Random(0)
    words = "a b c d e".split()
    for _ in range(300):
        k = rng.randint(1, 4)
        pred = " ".join(rng.choice(words) for _ in range(rng.randint(k, 8)))
        label = " ".join(rng.choice(words) for _ in range(rng.randint(k, 8)))
        assert bleu(pred, label, k) == pytest.approx(book_bleu(pred, label, k), abs=1e-12)


def test_bleu_prediction_shorter_than_k_skips_missing_orders():
    # One token: no bigram exists, so only the unigram precision and brevity penalty count.
    assert bleu("va", "va", k=2) == 1.0
    assert bleu("va", "va !", k=2) == pytest.approx(math.exp(1 - 2 / 1))
    assert bleu("il est", "il est calme .", k=4) == pytest.approx(math.exp(1 - 4 / 2))
    # An order the prediction has but the label lacks scores 0 (here: bigrams vs a 1-token label).
    assert bleu("a b", "a", k=2) == 0.0


def test_bleu_empty_and_bad_input():
    assert bleu("", "il est calme .", k=2) == 0.0
    assert bleu("   ", "il est calme .", k=2) == 0.0
    with pytest.raises(ValueError, match="label is empty"):
        bleu("il", "", k=2)
    with pytest.raises(ValueError, match="k"):
        bleu("il", "il", k=0)


def test_corpus_scores():
    refs = ["Il est calme.", "Je suis chez moi."]
    assert corpus_bleu(refs, refs) == pytest.approx(100.0)
    assert corpus_chrf(refs, refs) == pytest.approx(100.0)
    assert corpus_bleu(["x y z w", "q r s t u"], refs) == pytest.approx(0.0)
    partial = corpus_bleu(["Il est riche.", "Je suis chez moi."], refs)
    assert 0.0 < partial < 100.0
    with pytest.raises(ValueError, match="pair up"):
        corpus_bleu(["a"], refs)
    with pytest.raises(ValueError, match="lists"):
        corpus_chrf("a", "a")


# --------------------------------------------------------------------------- multi-reference scoring
def test_group_by_source_keeps_every_reference():
    from types import SimpleNamespace as Ex

    from attnlab.metrics import group_by_source

    exs = [
        Ex(src_text="go .", tgt_text="va !"),
        Ex(src_text="hi .", tgt_text="salut ."),
        Ex(src_text="go .", tgt_text="marche ."),
        Ex(src_text="go .", tgt_text="va !"),
    ]
    sources, refs = group_by_source(exs)
    assert [e.src_text for e in sources] == ["go .", "hi ."]
    assert refs == [["va !", "marche ."], ["salut ."]]


def test_multi_reference_bleu_credits_any_reference():
    from attnlab.metrics import corpus_bleu, corpus_chrf

    hyps = ["il est calme .", "je suis chez moi ."]
    single = corpus_bleu(hyps, ["il est tranquille .", "je suis chez moi ."])
    multi = corpus_bleu(hyps, [["il est tranquille .", "il est calme ."], ["je suis chez moi ."]])
    assert multi == pytest.approx(100.0) and single < 80
    refs = [["il est tranquille .", "il est calme ."], ["je suis chez moi ."]]
    assert corpus_chrf(hyps, refs) == pytest.approx(100.0)
    # one reference each, as strings or one-element lists, gives the same score
    assert corpus_bleu(hyps, ["il est tranquille .", "je suis chez moi ."]) == corpus_bleu(
        hyps, [["il est tranquille ."], ["je suis chez moi ."]]
    )
    with pytest.raises(ValueError, match="no reference"):
        corpus_bleu(hyps, [[], ["x"]])


def test_scores_by_length_buckets():
    from attnlab.metrics import scores_by_length

    sources = ["go .", "one two three four five", "a b c d e f g h", "w " * 12]
    hyps = ["il est calme .", "un deux trois", "x", "y"]
    refs = [["il est calme ."], ["un deux trois"], ["z"], ["y"]]
    rows = scores_by_length(sources, hyps, refs)
    assert [r["bucket"] for r in rows] == ["1-4", "5-7", "8-10", "11+"]
    assert [r["sentences"] for r in rows] == [1, 1, 1, 1]
    assert rows[0]["bleu"] == pytest.approx(100.0) and rows[2]["bleu"] == 0.0
    empty = scores_by_length(["go ."], ["va !"], ["va !"])
    assert empty[1] == {"bucket": "5-7", "sentences": 0, "bleu": None, "chrf": None}
