"""The page's tokenizer (serve/static/tokenizer.js, run in node) segments and detokenizes exactly as the run's
Python vocabulary does: a word vocabulary and a BPE one, on the sample corpus' test split (both sides) and on
strings that stress the preprocessing (spacing, marks, no-break spaces, case, special tokens, non-ASCII)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from attnlab.data import SubwordVocab, Vocab, load_data, sample_data_path
from attnlab.data.text import preprocess, tokenize

TOKENIZER_JS = Path(__file__).resolve().parents[2] / "src" / "attnlab" / "serve" / "static" / "tokenizer.js"
TRICKY = [
    "Hello,world!! How are you?",
    "  double  spaces  ",
    "a  . b..c",
    ".starts with a mark",
    "?!",
    "no\u00a0break\u202fspaces .",
    "Ünïcödé çà et là, l'été !",
    "ΣΟΦΟΣ ΟΔΟΣ",
    "İstanbul",
    "tab\there",
    "an <eos> inside, and <unk>",
    "émoji 🙂 ok .",
    "",
]

RUNNER = """
const T = require(process.argv[1]);
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const tok = T.load(input.vocab);
const out = { ids: input.texts.map((t) => tok.encode(t)), text: input.decode.map((ids) => tok.decode(ids)),
  pre: input.texts.map((t) => T.preprocess(t)) };
process.stdout.write(JSON.stringify(out));
"""


def _node(vocab_json: dict, texts: list[str], decode: list[list[int]]) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node (Node.js) to run the page's tokenizer (CI machines have it)")
    payload = json.dumps({"vocab": vocab_json, "texts": texts, "decode": decode})
    done = subprocess.run(
        [node, "-e", RUNNER, str(TOKENIZER_JS)], input=payload, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def corpus():
    return load_data({"loader": "translation", "path": str(sample_data_path()), "min_freq": 1, "use_cache": False,
                      "valid_fraction": 0.2, "test_fraction": 0.2})  # fmt: skip


def _check(vocab, vocab_json, texts):
    ids = [vocab.encode(t) for t in texts]
    specials = [vocab.bos, *ids[0], vocab.pad, vocab.eos, *ids[1]]  # <bos>/<pad> dropped, cut at <eos>
    got = _node(vocab_json, texts, [*ids, specials])
    assert got["pre"] == [preprocess(t) for t in texts]
    for text, want, have in zip(texts, ids, got["ids"]):
        assert have == want, text
    assert got["text"] == [vocab.decode(i) for i in [*ids, specials]]


def test_word_vocabulary(corpus, tmp_path):
    test = corpus.test
    texts = [ex.src_text for ex in test] + TRICKY
    assert len(texts) > 20
    _check(corpus.src_vocab, corpus.src_vocab.to_dict(), texts)
    tgt_texts = [ex.tgt_text for ex in test] + TRICKY
    _check(corpus.tgt_vocab, corpus.tgt_vocab.to_dict(), tgt_texts)
    assert any(corpus.src_vocab.unk in corpus.src_vocab.encode(t) for t in TRICKY)  # unknown words on the way


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_bpe_vocabulary(corpus, tmp_path, lang):
    train_texts = [ex.src_text for ex in corpus.train] + [ex.tgt_text for ex in corpus.train]
    vocab = SubwordVocab.train(train_texts, vocab_size=300, min_freq=1, lang=lang)
    vocab.save(tmp_path / "bpe.json")
    obj = json.loads((tmp_path / "bpe.json").read_text())
    side = "src_text" if lang == "en" else "tgt_text"
    texts = [getattr(ex, side) for ex in corpus.test] + TRICKY
    assert any(len(vocab.encode(t)) > len(tokenize(t)) for t in texts)  # words split into pieces
    _check(vocab, obj, texts)


def test_refuses_what_it_cannot_reproduce(tmp_path):
    from attnlab.export.web import check_tokenizer

    check_tokenizer(Vocab([["a", "b"]], min_freq=1), "source")
    plain = SubwordVocab(SubwordVocab.train(["a b c", "a b"], vocab_size=40, min_freq=1).tokenizer, style="plain")
    with pytest.raises(ValueError, match="the source side has a BPE vocabulary with its own normalizer"):
        check_tokenizer(plain, "source")
