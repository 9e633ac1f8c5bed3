"""`DecodeOptions`: every choice of how to decode, in one dataclass validated in one place, so the
command line, the Python API and a REST body pass the same thing.

    opts = DecodeOptions(beam=5, n_best=3, no_repeat_ngram=3, constraints=("la maison",))
    translator.translate_tokens(["i'm home ."], options=opts)[0].nbest   # 3 Translations, best first
    DecodeOptions.from_dict({"sample": True, "top_p": 0.9, "seed": 1})  # unknown keys raise

Strategies: greedy (beam 1), beam search (beam > 1; n-best from its finished hypotheses), sampling
(`sample`: n_best independent samples per source, with temperature, top-k and nucleus top-p), and
lexically constrained beam search (`constraints`). Length and repetition controls, a target prefix and
word alignments apply to all of them. The default options decode exactly as `Translator.decode` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from attnlab.utils.checks import SEED_MAX, check_field_types, check_range

__all__ = ["DecodeOptions", "MAX_BEAM", "MAX_OUTPUT_TOKENS", "MAX_SAMPLES", "MAX_NGRAM", "target_ids"]

DEFAULT_BEAM = 4  # translate's and evaluate's beam (Marian's generation default): +2.5-2.9 BLEU over greedy
MAX_BEAM = 16  # beams x output length is memory: 16 is far past where BLEU stops improving
MAX_SAMPLES = 64  # samples per source: each is one decoding row
MAX_OUTPUT_TOKENS = 1024  # --max-len: a cap on memory (caches grow with it), not on quality
MAX_NGRAM = 10


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode. Text fields (prefix, constraints) are target-language text, encoded by the
    Translator with its target vocabulary.

    prefix: one text for every sentence, or a sequence with one (or None) per sentence.
    constraints: phrases every output must contain: a sequence of texts for every sentence, or a
        sequence of such sequences, one per sentence.
    """

    beam: int = 1  # hypotheses kept per sentence; 1 = greedy
    n_best: int = 1  # hypotheses returned per sentence, best first (<= beam; with sample: samples drawn)
    sample: bool = False  # draw tokens from the model's distribution instead of searching
    temperature: float = 1.0  # sampling: divides the logits (> 0; < 1 sharpens, > 1 flattens)
    top_k: int = 0  # sampling: only the k likeliest tokens (0 = all)
    top_p: float = 1.0  # sampling: only the smallest set of tokens holding this probability (0, 1]
    seed: int | None = None  # sampling: same seed, input and batch size -> same samples; None = random
    length_penalty: float = 1.0  # scores are log-probability / length ** length_penalty
    min_len: int = 0  # <eos> is forbidden before this many output tokens (the prefix counts)
    max_len: int | None = None  # most decoding steps (<eos> included); None = the Translator's limit
    no_repeat_ngram: int = 0  # no n-gram of this size occurs twice in an output (0 = off)
    prefix: str | Sequence[str | None] | None = None  # decoding continues after these target words
    constraints: Sequence[Any] = ()  # phrases that must appear (lexically constrained beam search)
    align: bool = False  # word alignments from cross-attention
    align_layer: int | None = None  # decoder layer for alignments; None = the run's alignment.json, else last but one
    align_heads: Sequence[int] | None = None  # heads averaged for alignments; None = the run's choice, else all

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DecodeOptions:
        """From a JSON body or config: unknown keys and wrong types raise ValueError."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown decoding option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**d)

    def validate(self) -> None:
        """Raise ValueError (one line, naming the option) for values that cannot decode."""
        plain = {"prefix", "constraints", "align_heads"}
        check_field_types(type(self), {f.name: getattr(self, f.name) for f in fields(self) if f.name not in plain})
        check_range("beam", self.beam, 1, MAX_BEAM, integer=True)
        if self.sample:
            check_range("n_best", self.n_best, 1, MAX_SAMPLES, integer=True, why=" (samples per source)")
            if self.beam != 1:
                raise ValueError(f"sample draws n_best samples per source and takes no beam, got beam={self.beam}")
            if self.constraints:
                raise ValueError("constraints need beam search; drop sample")
        else:
            check_range("n_best", self.n_best, 1, self.beam, integer=True, why=f" (the beam, {self.beam})")
            changed = [n for n, v, d in self._sampling() if v != d]
            if changed:
                raise ValueError(f"{', '.join(changed)} only apply to sampling; add sample (--sample)")
        check_range("temperature", self.temperature, 0, lo_open=True)
        check_range("top_k", self.top_k, 0, integer=True)
        check_range("top_p", self.top_p, 0, 1, lo_open=True)
        check_range("seed", self.seed, 0, SEED_MAX, integer=True, none_ok=True)
        check_range("length_penalty", self.length_penalty, 0, 5)
        check_range("max_len", self.max_len, 1, MAX_OUTPUT_TOKENS, integer=True, none_ok=True)
        check_range("min_len", self.min_len, 0, self.max_len or MAX_OUTPUT_TOKENS, integer=True,
                    why="" if self.max_len is None else " (max_len)")  # fmt: skip
        check_range("no_repeat_ngram", self.no_repeat_ngram, 0, MAX_NGRAM, integer=True)
        check_range("align_layer", self.align_layer, 0, integer=True, none_ok=True)
        if self.align_heads is not None:
            if not isinstance(self.align_heads, (list, tuple)) or not self.align_heads:
                raise ValueError(f"align_heads must be a non-empty list of head indices, got {self.align_heads!r}")
            for h in self.align_heads:
                check_range("align_heads", h, 0, integer=True)
        if (self.align_layer is not None or self.align_heads is not None) and not self.align:
            raise ValueError("align_layer and align_heads choose the alignment's attention; add align (--align)")
        _check_texts("prefix", self.prefix, allow_none=True)
        if isinstance(self.constraints, (str, bytes)):
            raise ValueError(f"constraints must be a list of phrases, got one string {self.constraints!r}")
        if not isinstance(self.constraints, (list, tuple)):
            raise ValueError(f"constraints must be a list of phrases, got {self.constraints!r}")
        for c in self.constraints:
            _check_texts("constraints", c, allow_none=False)

    def _sampling(self) -> list[tuple[str, Any, Any]]:
        return [("temperature", self.temperature, 1.0), ("top_k", self.top_k, 0), ("top_p", self.top_p, 1.0)]

    @property
    def plain(self) -> bool:
        """True when these options decode as `Translator.decode` (greedy or beam, one answer)."""
        return (
            self.n_best == 1
            and not self.sample
            and not self.min_len
            and self.max_len is None
            and not self.no_repeat_ngram
            and self.prefix is None
            and not self.constraints
        )

    def for_sentence(self, i: int, n: int) -> tuple[str | None, list[str]]:
        """Sentence i's (of n) prefix text and constraint phrases, or ValueError if a per-sentence list
        does not have n entries."""
        prefix = self.prefix
        if prefix is not None and not isinstance(prefix, str):
            if len(prefix) != n:
                raise ValueError(f"prefix has {len(prefix)} entries for {n} sentences; give one per sentence")
            prefix = prefix[i]
        cons = list(self.constraints)
        if cons and not isinstance(cons[0], str):
            if len(cons) != n:
                raise ValueError(f"constraints has {len(cons)} lists for {n} sentences; give one list per sentence")
            cons = list(cons[i])
        return prefix, cons


def _check_texts(name: str, value, allow_none: bool) -> None:
    """A text, or a sequence of texts (None entries allowed for per-sentence prefixes): none blank."""
    items = [value] if value is None or isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise ValueError(f"{name} must be a text or a list of texts, got {type(value).__name__}")
    for v in items:
        if v is None and allow_none:
            continue
        if isinstance(v, Sequence) and not isinstance(v, str) and name == "constraints":
            for w in v:
                _check_texts(name, w, allow_none=False)
            continue
        if not isinstance(v, str):
            raise ValueError(f"{name} must hold texts, got {type(v).__name__} {v!r}")
        if not v.strip():
            raise ValueError(f"{name}: an empty phrase {v!r}; give some target words or leave it out")


def target_ids(
    tgt_vocab, options: DecodeOptions, limits: Sequence[int]
) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Each sentence's prefix and constraint phrases as target ids (limits[i]: sentence i's output limit in
    tokens), or ValueError: a prefix of only unknown words, a phrase with an unknown word, or more target
    tokens than the output limit holds."""
    n = len(limits)
    prefixes, constraints = [], []
    for i, limit in enumerate(limits):
        prefix, phrases = options.for_sentence(i, n)
        p = tgt_vocab.encode(prefix) if prefix is not None else []
        if prefix is None:
            pass
        elif not p or all(t == tgt_vocab.unk for t in p):
            raise ValueError(f"the prefix {prefix[:60]!r} has no word the target vocabulary knows; give target words")
        elif len(p) >= limit:
            raise ValueError(
                f"the prefix {prefix[:60]!r} has {len(p)} tokens but outputs of sentence {i} hold at most "
                f"{limit - 1} before <eos>; shorten it or raise max_len"
            )
        cs = []
        for phrase in phrases:
            c = tgt_vocab.encode(phrase)
            if not c:
                raise ValueError(f"the constraint {phrase!r} has no tokens; give target-language words")
            if tgt_vocab.unk in c:
                raise ValueError(
                    f"the constraint {phrase[:60]!r} has a word the target vocabulary does not know "
                    "(it would appear as <unk>); rephrase it"
                )
            cs.append(c)
        used = len(p) + sum(map(len, cs))
        if cs and used > limit:
            raise ValueError(
                f"the constraints{' and prefix' if p else ''} of sentence {i} need {used} tokens but its output "
                f"limit is {limit}; shorten them or raise max_len"
            )
        prefixes.append(p)
        constraints.append(cs)
    return prefixes, constraints
