import random

import pytest

from attnlab.data import detokenize, preprocess, tokenize


def book_preprocess_nmt(text):
    """Verbatim from d2l's `preprocess_nmt`, the reference our fast version must equal."""

    def no_space(char, prev_char):
        return char in set(",.!?") and prev_char != " "

    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = [" " + char if i > 0 and no_space(char, text[i - 1]) else char for i, char in enumerate(text)]
    return "".join(out)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Go.", "go ."),
        ("Va !", "va !"),
        ("Cours\u202f!", "cours !"),
        ("Who?", "who ?"),
        ("Qui\xa0?", "qui ?"),
        ("I lost.", "i lost ."),
        ("Wait...", "wait . . ."),
        ("Hello, Tom!", "hello , tom !"),
        (".Go", ".go"),
    ],
)
def test_preprocess_book_examples(raw, expected):
    assert preprocess(raw) == expected == book_preprocess_nmt(raw)


def test_preprocess_equals_book_on_random_strings():
    rng = random.Random(0)
    alphabet = " ,.!?aZé\u202f\xa0\t"
    for _ in range(20000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
        assert preprocess(s) == book_preprocess_nmt(s), repr(s)


def test_book_line_gives_book_tokens():
    src, tgt = "Go.\tVa !".split("\t")
    assert tokenize(src) == ["go", "."] and tokenize(tgt) == ["va", "!"]
    assert tokenize("Hi  there.") == ["hi", "there", "."]  # doubled space: no empty token


@pytest.mark.parametrize(
    "text, lang",
    [
        ("go.", "en"),
        ("hello, tom! are you there? yes.", "en"),
        ("wait...", "en"),
        ("it costs 3.50, ok?", "en"),
        ("va !", "fr"),
        ("j'ai perdu.", "fr"),
        ("qui ?", "fr"),
        ("bonjour, tom ! ça va ?", "fr"),
        ("attends...", "fr"),
    ],
)
def test_detokenize_inverts_tokenize(text, lang):
    assert detokenize(tokenize(text), lang=lang) == text
    assert detokenize(" ".join(tokenize(text)), lang=lang) == text  # a string works too


def test_detokenize_french_keeps_space_before_bang_and_question():
    assert detokenize(["va", "!"], lang="fr") == "va !"
    assert detokenize(["go", "!"]) == "go!"
    with pytest.raises(ValueError, match="lang"):
        detokenize(["x"], lang="de")


def test_detokenize_is_the_rule_written_as_regular_expressions():
    import random
    import re

    marks = {"en": ",.!?", "fr": ",."}

    def rule(text, lang):  # runs of spaces become one, then a space before a mark goes
        text = re.sub(" {2,}", " ", text).strip()
        return re.sub(f" ([{re.escape(marks[lang or 'en'])}])", r"\1", text)

    rng = random.Random(0)
    for _ in range(20000):
        text = "".join(rng.choice("ab ,.!?  \t") for _ in range(rng.randint(0, 12)))
        for lang in (None, "en", "fr"):
            assert detokenize(text, lang=lang) == rule(text, lang), (text, lang)
