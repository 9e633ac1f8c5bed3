"""The target side of `DecodeOptions` as ids: each sentence's prefix and constraint phrases, encoded with
the target vocabulary and checked against that sentence's output limit and the other options, so that
what cannot hold is refused in one line (an `OptionError` naming the field) before any decoding.

    prefixes, constraints = target_ids(tgt_vocab, options, limits)   # limits[i]: sentence i's output tokens

Refused: a prefix or phrase with a word the vocabulary does not know (it would decode as <unk>), more
tokens than the limit holds, a `min_len` the limit leaves no room for, and constraints that
`no_repeat_ngram` forbids (a phrase that repeats an n-gram of that size, or one given twice).
"""

from __future__ import annotations

from collections.abc import Sequence

from attnlab.decoding.options import DecodeOptions, OptionError

__all__ = ["holds_phrases", "repeated_ngram", "target_ids"]


def repeated_ngram(tokens: Sequence[int], n: int) -> tuple[int, ...] | None:
    """The first n-gram that occurs twice in `tokens` (overlaps count), or None.

    Examples:
        >>> repeated_ngram([4, 5, 4, 5], 2), repeated_ngram([4, 5, 6], 2)
        ((4, 5), None)
    """
    seen: set[tuple[int, ...]] = set()
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        if gram in seen:
            return gram
        seen.add(gram)
    return None


def holds_phrases(tokens: Sequence[int], phrases: Sequence[Sequence[int]]) -> bool:
    """True when every phrase occurs in `tokens` as a contiguous run, a phrase given k times k times
    (occurrences may overlap), as constrained search counts them.

    Examples:
        >>> holds_phrases([7, 4, 5, 9], [[4, 5], [9]]), holds_phrases([4, 5], [[4, 5], [4, 5]])
        (True, False)
    """
    row = list(tokens)
    for phrase in {tuple(p) for p in phrases}:
        need = sum(1 for p in phrases if tuple(p) == phrase)
        found = sum(1 for i in range(len(row) - len(phrase) + 1) if tuple(row[i : i + len(phrase)]) == phrase)
        if found < need:
            return False
    return True


def target_ids(
    tgt_vocab, options: DecodeOptions, limits: Sequence[int]
) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Each sentence's prefix and constraint phrases as target ids (limits[i]: sentence i's output limit in
    tokens, <eos> included), or OptionError (see the module docstring)."""
    n = len(limits)
    if options.prefix is None and not options.constraints and (not limits or options.min_len < min(limits)):
        return [[] for _ in limits], [[] for _ in limits]  # nothing per sentence: no loop (1,000s of sentences)
    prefixes, constraints = [], []
    for i, limit in enumerate(limits):
        if options.min_len >= limit:
            raise OptionError(
                f"min_len {options.min_len} leaves no room for the <eos> of sentence {i}, whose outputs hold at most "
                f"{limit} tokens; lower it below {limit} or raise max_len",
                "min_len",
            )
        prefix, phrases = options.for_sentence(i, n)
        p = _prefix_ids(tgt_vocab, prefix, i, limit)
        cs = [_phrase_ids(tgt_vocab, phrase, options.no_repeat_ngram) for phrase in phrases]
        _check_repeats(phrases, cs, options.no_repeat_ngram)
        used = len(p) + sum(map(len, cs))
        if cs and used > limit:
            raise OptionError(
                f"the constraints{' and prefix' if p else ''} of sentence {i} need {used} tokens but its output "
                f"limit is {limit}; shorten them or raise max_len",
                "constraints",
            )
        prefixes.append(p)
        constraints.append(cs)
    return prefixes, constraints


def _known_ids(tgt_vocab, text: str, what: str, field: str) -> list[int]:
    """`text` as target ids, or OptionError if it has none or a word the vocabulary does not know (one rule for
    prefixes and constraints: an <unk> in either is never what was asked)."""
    ids = tgt_vocab.encode(text)
    if not ids:
        raise OptionError(f"the {what} {text[:60]!r} has no tokens; give target-language words", field)
    if tgt_vocab.unk in ids:
        raise OptionError(
            f"the {what} {text[:60]!r} has a word the target vocabulary does not know (it would appear as "
            "<unk>); rephrase it",
            field,
        )
    return ids


def _prefix_ids(tgt_vocab, prefix: str | None, i: int, limit: int) -> list[int]:
    if prefix is None:
        return []
    p = _known_ids(tgt_vocab, prefix, "prefix", "prefix")
    if len(p) >= limit:
        raise OptionError(
            f"the prefix {prefix[:60]!r} has {len(p)} tokens but outputs of sentence {i} hold at most "
            f"{limit - 1} before <eos>; shorten it or raise max_len",
            "prefix",
        )
    return p


def _phrase_ids(tgt_vocab, phrase: str, no_repeat: int) -> list[int]:
    c = _known_ids(tgt_vocab, phrase, "constraint", "constraints")
    if no_repeat and repeated_ngram(c, no_repeat) is not None:
        raise OptionError(
            f"the constraint {phrase[:60]!r} repeats a {no_repeat}-gram, which no_repeat_ngram {no_repeat} "
            "forbids; drop one of them or raise no_repeat_ngram",
            "constraints",
        )
    return c


def _check_repeats(phrases: Sequence[str], ids: Sequence[list[int]], no_repeat: int) -> None:
    """A phrase of n tokens or more given twice must occur twice: its n-grams would repeat."""
    if not no_repeat:
        return
    seen: set[tuple[int, ...]] = set()
    for phrase, c in zip(phrases, ids):
        if len(c) >= no_repeat and tuple(c) in seen:
            raise OptionError(
                f"the constraint {phrase[:60]!r} is given twice, so its {no_repeat}-grams would repeat, which "
                f"no_repeat_ngram {no_repeat} forbids; give it once or raise no_repeat_ngram",
                "constraints",
            )
        seen.add(tuple(c))
