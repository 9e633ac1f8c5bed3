"""DecodeOptions on tiny random models: validation, sampling (top-k 1 is greedy, seeds reproduce),
the filters and n-gram bans against `transformers`' processors, prefixes, constraints and alignments."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis.explanation import explain
from attnlab.data import Vocab
from attnlab.decoding import (
    DecodeOptions,
    NoRepeatNGram,
    OptionError,
    Progress,
    TopK,
    TopP,
    Translator,
    generate,
    word_alignment,
)
from attnlab.decoding.align import alignment_heads, cross_attention
from attnlab.decoding.processors import banned_ngram_tokens
from attnlab.models import Transformer, TransformerConfig

pytestmark = pytest.mark.usefixtures("one_thread")

EN = [["i'm", "home", "."], ["go", "."], ["he's", "calm", "."], ["i", "lost", "."]]
FR = [["je", "suis", "chez", "moi", "."], ["va", "!"], ["il", "est", "calme", "."], ["j'ai", "perdu", "."]]
SENTENCES = ["i'm home .", "go .", "he's calm .", "i lost .", "go home .", "i'm calm ."]


@pytest.fixture(scope="module")
def translator():
    src, tgt = Vocab(EN, min_freq=1), Vocab(FR, min_freq=1)
    torch.manual_seed(0)
    cfg = TransformerConfig(len(src), len(tgt), num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=32)
    return Translator(Transformer(cfg), src, tgt)


def _search(tr, texts, steps=12, **options):
    """Hypothesis lists of the generator on these texts (one batch, `steps` at most)."""
    src, lens = _batch(tr, texts)
    opts = DecodeOptions(**options)
    return generate(tr.model, src, lens, opts, bos=tr.bos, eos=tr.tgt_vocab.eos, max_len=steps)


def _batch(tr, texts):
    ids = [tr.src_vocab.encode(t) + [tr.src_vocab.eos] for t in texts]
    S = max(map(len, ids))
    return torch.tensor([s + [tr.src_vocab.pad] * (S - len(s)) for s in ids]), torch.tensor(list(map(len, ids)))


# -- validation: one line each ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(beam=2, n_best=3), "n_best must be an integer >= 1 and <= 2"),
        (dict(sample=True, top_p=0.0), "top_p must be a finite number > 0 and <= 1"),
        (dict(sample=True, top_p=1.5), "top_p"),
        (dict(sample=True, temperature=0.0), "temperature must be a finite number >= 0.0001"),
        (dict(temperature=0.5), "applies only to sampling"),
        (dict(seed=3), "seed applies only to sampling"),
        (dict(n_best=0), "n_best must be an integer >= 1"),
        (dict(sample=True, n_best=0), "n_best must be an integer >= 1"),
        (dict(sample=True, beam=4), "takes no beam"),
        (dict(constraints=("",)), "empty phrase"),
        (dict(constraints="chez moi"), "one string"),
        (dict(align_layer=1), "add align"),
        (dict(no_repeat_ngram=-1), "no_repeat_ngram"),
        (dict(min_len=5, max_len=3), "min_len"),
        (dict(min_len=3, max_len=3), "min_len must be an integer >= 0 and <= 2"),
    ],
)
def test_bad_options_are_one_line_value_errors(kw, words):
    with pytest.raises(OptionError, match=words) as e:
        DecodeOptions(**kw)
    assert "\n" not in str(e.value)
    assert e.value.field in kw  # the field it names, for a command line to name its flag
    assert e.value.named("--flag").startswith("--flag")


def test_merged_defaults_take_the_changes():
    defaults = DecodeOptions(beam=4)
    assert defaults.merged({"sample": True}) == DecodeOptions(sample=True)  # sampling takes no beam
    assert defaults.merged({"n_best": 2}) == DecodeOptions(beam=4, n_best=2)
    assert DecodeOptions(beam=4, n_best=3).merged({"beam": 2}) == DecodeOptions(beam=2, n_best=2)
    with pytest.raises(OptionError, match="unknown decoding option"):
        defaults.merged({"beams": 2})


def test_from_dict_refuses_unknown_keys_and_wrong_types():
    assert DecodeOptions.from_dict({"beam": 3, "n_best": 2}) == DecodeOptions(beam=3, n_best=2)
    with pytest.raises(ValueError, match="unknown decoding option"):
        DecodeOptions.from_dict({"beams": 3})
    with pytest.raises(ValueError, match="beam must be an integer"):
        DecodeOptions.from_dict({"beam": "3"})


def test_target_text_errors(translator):
    with pytest.raises(OptionError, match=r"prefix .* does not know") as e:
        translator.translate(["go ."], options=DecodeOptions(prefix="zzz qqq"))
    assert e.value.field == "prefix"
    with pytest.raises(OptionError, match="does not know"):  # one unknown word is refused, as in a constraint
        translator.translate(["go ."], options=DecodeOptions(prefix="je 😀😀"))
    with pytest.raises(ValueError, match="does not know"):
        translator.translate(["go ."], options=DecodeOptions(beam=2, constraints=("chez zzz",)))
    with pytest.raises(ValueError, match="output limit is 3"):
        translator.translate(["go ."], options=DecodeOptions(beam=2, max_len=3, constraints=("je suis chez moi",)))
    with pytest.raises(ValueError, match="one per sentence"):
        translator.translate(["go .", "i lost ."], options=DecodeOptions(prefix=["je"]))


def test_min_len_past_the_output_limit_is_refused(translator):
    limit = translator.output_limit(len(translator.src_vocab.encode("go .")) + 1)
    with pytest.raises(OptionError, match=f"min_len {limit} leaves no room .* at most {limit} tokens") as e:
        translator.translate(["go ."], options=DecodeOptions(min_len=limit))
    assert e.value.field == "min_len"
    (t,) = translator.translate_tokens(["go ."], options=DecodeOptions(min_len=limit - 1))
    assert len(t.tgt_tokens) >= limit - 1


@pytest.mark.parametrize("cons", [("je suis je suis",), ("je suis", "je suis")])
def test_constraints_no_repeat_ngram_forbids_are_refused(translator, cons):
    with pytest.raises(OptionError, match="no_repeat_ngram 2 forbids") as e:
        translator.translate(["go ."], options=DecodeOptions(beam=2, no_repeat_ngram=2, constraints=cons))
    assert e.value.field == "constraints"
    # without the ban they hold
    (t,) = translator.translate_tokens(["go ."], options=DecodeOptions(beam=2, max_len=16, constraints=cons))
    assert " ".join(t.tgt_tokens).count("je suis") >= 2


def test_an_output_without_its_constraints_is_never_returned(translator):
    """The prefix "moi" and no repeated token leave "chez moi" impossible (nothing checks that up front): every
    hypothesis is cut at the limit without it, and that is an error, not a translation lacking it."""
    opts = DecodeOptions(beam=2, no_repeat_ngram=1, prefix="moi", constraints=("chez moi",))
    with pytest.raises(OptionError, match=r"no translation of sentence 0 .* holds every constraint"):
        translator.translate(["go ."], options=opts)


# -- sampling -----------------------------------------------------------------------------------------------
def test_sampling_at_top_k_1_equals_greedy(translator):
    tr = translator
    want = [hs[0] for hs in _search(tr, SENTENCES)]
    for seed in (0, 1):
        got = _search(tr, SENTENCES, sample=True, top_k=1, seed=seed)
        assert [g[0].tokens for g in got] == [w.tokens for w in want]
        torch.testing.assert_close(torch.tensor([g[0].score for g in got]), torch.tensor([w.score for w in want]))
    opts = DecodeOptions(sample=True, top_k=1, seed=3)
    assert translator.translate(SENTENCES, options=opts) == translator.translate(SENTENCES, options=DecodeOptions())


def test_samples_are_reproducible_with_a_seed_and_vary_without(translator):
    opts = DecodeOptions(sample=True, n_best=4, seed=11, temperature=1.5)
    a = [[h.text for h in t.nbest] for t in translator.translate_tokens(SENTENCES, options=opts)]
    b = [[h.text for h in t.nbest] for t in translator.translate_tokens(SENTENCES, options=opts)]
    assert a == b and all(len(x) == 4 for x in a)
    c = [[h.text for h in t.nbest] for t in translator.translate_tokens(SENTENCES, options=DecodeOptions(
        sample=True, n_best=4, seed=12, temperature=1.5))]  # fmt: skip
    assert a != c
    assert len({s for x in a for s in x}) > len(SENTENCES), "samples should differ from each other"


def test_filters_equal_transformers_warpers():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 50, generator=g) * 3
    for k in (1, 5, 49):
        want = TopKLogitsWarper(k)(None, scores.clone())
        assert torch.equal(torch.isfinite(TopK(k)(scores, scores)), torch.isfinite(want))
    for p in (0.05, 0.5, 0.9, 0.999):
        want = TopPLogitsWarper(p)(None, scores.clone())
        assert torch.equal(torch.isfinite(TopP(p)(scores, scores)), torch.isfinite(want))


def test_no_repeat_ngram_bans_equal_transformers():
    from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

    g = torch.Generator().manual_seed(1)
    hist = torch.randint(0, 4, (8, 12), generator=g)  # a small alphabet: many repeats
    for n in (1, 2, 3):
        want = NoRepeatNGramLogitsProcessor(n)(hist, torch.zeros(8, 6))
        got = NoRepeatNGram(n)(torch.zeros(8, 6), hist)
        assert torch.equal(got, want)
        assert [banned_ngram_tokens(h, n) for h in hist.tolist()] == [
            torch.isinf(w).nonzero().squeeze(1).tolist() for w in want
        ]


# -- controls and prefixes --------------------------------------------------------------------------------
@pytest.mark.parametrize("beam", [1, 3])
def test_min_len_no_repeat_and_prefix(translator, beam):
    opts = DecodeOptions(beam=beam, min_len=4, no_repeat_ngram=1, prefix="il est")
    out = translator.translate_tokens(SENTENCES, options=opts)
    for t in out:
        assert t.tgt_tokens[:2] == ["il", "est"] and len(t.tgt_tokens) >= 4
        assert len(set(t.tgt_tokens)) == len(t.tgt_tokens)
    per_sentence = DecodeOptions(beam=beam, prefix=["je", None, "il", None, "va", None])
    for t, p in zip(translator.translate_tokens(SENTENCES, options=per_sentence), per_sentence.prefix):
        assert p is None or t.tgt_tokens[0] == p


# -- constraints --------------------------------------------------------------------------------------------
def test_progress_follows_phrases_in_any_order():
    phrases = [[3, 4, 5], [7]]
    p = Progress.start(2)
    for t in [3, 4, 9, 7, 3, 4, 5]:  # 3 4 is broken off by 9, then 7, then 3 4 5
        p = p.advance(phrases, t)
    assert p.done and p.produced(phrases) == 4
    assert Progress.start(2).wanted(phrases) == [3, 7]
    assert Progress.start(2).advance(phrases, 3).wanted(phrases) == [4]


@pytest.mark.parametrize("beam", [1, 4])
def test_every_constraint_appears(translator, beam):
    tr = translator
    src, lens = _batch(tr, SENTENCES)
    V = len(tr.tgt_vocab)
    g = torch.Generator().manual_seed(2)
    cons = [[torch.randint(4, V, (int(n),), generator=g).tolist() for n in torch.randint(1, 3, (2,), generator=g)]
            for _ in SENTENCES]  # fmt: skip
    cons[1] = []  # a sentence without constraints is plain beam search
    opts = DecodeOptions(beam=beam)
    hyps = generate(tr.model, src, lens, opts, bos=tr.bos, eos=tr.tgt_vocab.eos, max_len=20, constraints=cons)
    for hs, cs in zip(hyps, cons):
        toks = hs[0].tokens
        for c in cs:
            assert any(toks[i : i + len(c)] == c for i in range(len(toks))), (toks, c)
    plain = [h[0].tokens for h in hyps]
    unconstrained = [hs[0].tokens for hs in _search(tr, SENTENCES, beam=beam, steps=20)]
    assert plain != unconstrained


def test_constraints_through_the_translator(translator):
    opts = DecodeOptions(beam=4, n_best=2, constraints=("chez moi", "calme"))
    out = translator.translate_tokens(SENTENCES, options=opts)
    for t in out:
        assert 1 <= len(t.nbest) <= 2  # a runner-up cut at the length limit without them is left out
        for h in t.nbest:
            assert "chez moi" in h.text and "calme" in h.text


# -- alignments ---------------------------------------------------------------------------------------------
def test_word_alignment_of_identity_attention_merges_tokens_into_words():
    # source tokens: i'm | home . (word 1 has 2 tokens); target tokens: je suis | chez | moi .
    attn = torch.eye(5, 3)  # target token t attends source token t (tokens 3, 4: nothing)
    attn[3, 2] = attn[4, 2] = 1.0
    assert word_alignment(attn, [0, 1, 1], [0, 0, 1, 2, 2]) == [(0, 0), (1, 1), (1, 2)]


def test_cross_attention_equals_explain_maps(translator):
    tr = translator
    exp = explain(tr, "i'm home .", tr.options(beam=1))
    out = tr.search([tr.src_vocab.encode("i'm home .")], DecodeOptions())[0][0].tokens
    src, lens = _batch(tr, ["i'm home ."])
    for layer in (0, 1):
        got = cross_attention(tr.model, src, lens, [out], bos=tr.bos, pad=tr.tgt_vocab.pad, layer=layer, heads=[1])[0]
        torch.testing.assert_close(got[: len(out)], exp.maps["cross"][layer, 1, : len(out)], atol=1e-5, rtol=1e-5)


def test_alignments_in_the_result(translator):
    t = translator.translate_tokens(["i'm home ."], options=DecodeOptions(beam=2, n_best=2, align=True))[0]
    for h in t.nbest:
        words = h.text.split()
        assert [j for _, j in h.alignment] == list(range(len(words)))
        assert all(0 <= i < 3 for i, _ in h.alignment)  # "i'm", "home", "."
    assert alignment_heads(translator.model, None, None) == (0, [0, 1])  # two layers: the last but one
    with pytest.raises(ValueError, match=r"align_layer must be a decoder layer 0\.\.1"):
        translator.translate(["go ."], options=DecodeOptions(align=True, align_layer=2))
    with pytest.raises(ValueError, match=r"align_heads must be heads 0\.\.1"):
        translator.translate(["go ."], options=DecodeOptions(align=True, align_heads=(3,)))


def test_align_refuses_a_model_without_cross_attention():
    class NoCross(torch.nn.Module):
        def attention_kinds(self):
            return {"decoder_self": []}

    with pytest.raises(ValueError, match="need cross-attention"):
        alignment_heads(NoCross(), None, None)


def test_suppressed_tokens_equal_transformers():
    from transformers.generation.logits_process import SuppressTokensLogitsProcessor

    from attnlab.decoding import SuppressTokens

    scores = torch.randn(4, 9, generator=torch.Generator().manual_seed(3))
    want = SuppressTokensLogitsProcessor([2, 5])(torch.zeros(4, 1, dtype=torch.long), scores.clone())
    assert torch.equal(SuppressTokens((2, 5))(scores.clone(), torch.zeros(4, 1, dtype=torch.long)), want)
