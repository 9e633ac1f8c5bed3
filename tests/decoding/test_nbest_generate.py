"""n-best lists against `transformers`' generate on the same tiny Marian model, one sentence at a time:
`generate(num_beams=4, num_return_sequences=4, length_penalty=a, early_stopping=e)` for a in 0, 1, 2 and
e in (False: generate's default, True).

The semantics checked (DecodeOptions.early_stopping): False, the default of both, goes on after a sentence
has 4 finished hypotheses while its best live one, at its current length, could still beat the worst of
them (best live total / length ** a > worst finished score); True stops at the 4th. At the length limit the
first 4 candidates finish as they are; every sentence keeps its 4 best finished hypotheses.

Scores: both divide the sum of log-probabilities by (generated tokens, <eos> included) ** length_penalty.
generate() bans Marian's <pad> after its log-softmax (bad_words_ids), the imported model before it (its
`suppress_tokens`), so both are turned off here for the scores to be the same numbers.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.decoding import DecodeOptions
from attnlab.testing import sentences, tiny_marian

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

N = 4
SOURCES = sentences(12, seed=11)


@pytest.fixture(scope="module")
def pair(tmp_path_factory, one_thread):
    """(the imported Translator, generate's model, its tokenizer), <pad> allowed on both sides."""
    from transformers import MarianMTModel, MarianTokenizer

    from attnlab.export.marian.importer import import_hf
    from attnlab.runs.loading import load_translator

    folder = tiny_marian(tmp_path_factory.mktemp("marian"))
    tr = load_translator(import_hf(folder, tmp_path_factory.mktemp("run") / "opus"), precision="fp32")
    tr.model.config.suppress_tokens = []
    hf = MarianMTModel.from_pretrained(folder).eval()
    hf.generation_config.bad_words_ids = None
    return tr, hf, MarianTokenizer.from_pretrained(folder)


def _generate(pair, text: str, alpha: float, early: bool):
    tr, hf, tok = pair
    enc = tok([text], return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(
            **enc, do_sample=False, num_beams=N, num_return_sequences=N, length_penalty=alpha, early_stopping=early,
            max_new_tokens=tr.output_limit(enc["input_ids"].shape[1]), forced_eos_token_id=None,
            return_dict_in_generate=True, output_scores=True,
        )  # fmt: skip
    eos, pad = tr.tgt_vocab.eos, tr.tgt_vocab.pad
    rows = []
    for r in out.sequences[:, 1:].tolist():
        r = r[: r.index(eos)] if eos in r else r
        rows.append([t for t in r if t != pad])
    return rows, out.sequences_scores.tolist()


@pytest.mark.parametrize("alpha,early", [(0.0, False), (1.0, False), (2.0, False), (1.0, True)])
def test_nbest_equals_generate_on_every_sentence(pair, alpha, early):
    tr = pair[0]
    opts = DecodeOptions(beam=N, n_best=N, length_penalty=alpha, early_stopping=early)
    wrong = []
    for text in SOURCES:
        (hyps,) = tr.search([tr.src_vocab.encode(text)], opts)
        rows, scores = _generate(pair, text, alpha, early)
        got = [h.score for h in hyps]
        if [h.tokens for h in hyps] != rows or got != pytest.approx(scores, abs=1e-4):
            wrong.append((text, [round(s, 3) for s in got], [round(s, 3) for s in scores]))
    assert not wrong, f"{len(wrong)} of {len(SOURCES)} sentences differ from generate: {wrong[:3]}"


def test_the_default_goes_on_past_the_beams_first_finished_hypotheses(pair):
    """Somewhere early stopping changes a list (else the test above would not tell the two rules apart)."""
    tr = pair[0]
    ids = [tr.src_vocab.encode(t) for t in SOURCES]
    late = tr.search(ids, DecodeOptions(beam=N, n_best=N, early_stopping=False))
    early = tr.search(ids, DecodeOptions(beam=N, n_best=N, early_stopping=True))
    assert [[h.tokens for h in hs] for hs in late] != [[h.tokens for h in hs] for hs in early]
