"""`DecodeOptions`: every choice of how to decode, in one frozen record validated in one place (as Hugging
Face's `GenerationConfig`), so the command line, the Python API and a REST body pass the same thing.

    opts = DecodeOptions(beam=5, n_best=3, no_repeat_ngram=3, constraints=("la maison",))
    translator.translate_tokens(["i'm home ."], options=opts)[0].nbest   # 3 Translations, best first
    DecodeOptions.from_dict({"sample": True, "top_p": 0.9, "seed": 1})  # unknown keys raise
    translator.defaults.merged({"n_best": 2})   # the run's defaults (beam 4) with one change

Strategies: greedy (beam 1), beam search (beam > 1; n-best from its finished hypotheses), sampling
(`sample`: n_best independent samples per source, with temperature, top-k and nucleus top-p), and
lexically constrained beam search (`constraints`). Length and repetition controls, a target prefix and
word alignments apply to all of them. What a call returns is an option too (as Hugging Face's `output_scores`
and `return_dict_in_generate`): `scores=False` lets greedy skip the scores, `trace=True` records beam search.
The field defaults are the neutral record (greedy); the defaults a
user gets come from the run (`RUN/generation.json`, `TRANSLATOR_DEFAULTS` where there is none).

Every refusal is an `OptionError` (a ValueError, one line) whose `field` names the option, so a command
line can name its flag instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import Field, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from attnlab.utils.checks import SEED_MAX, check_field_types, check_range

__all__ = [
    "API_OPTIONS",
    "DEFAULTABLE",
    "DecodeOptions",
    "MAX_BEAM",
    "MAX_NGRAM",
    "MAX_OUTPUT_TOKENS",
    "MAX_SAMPLES",
    "MAX_TEMPERATURE",
    "MIN_TEMPERATURE",
    "OptionError",
    "SAMPLING",
    "TRANSLATOR_DEFAULTS",
    "head_indices",
    "option_fields",
]

MAX_BEAM = 16  # beams x output length is memory: 16 is far past where BLEU stops improving
MAX_SAMPLES = 64  # samples per source: each is one decoding row
MAX_OUTPUT_TOKENS = 1024  # --max-len: a cap on memory (caches grow with it), not on quality
MAX_NGRAM = 10
# Sampling divides float32 log-probabilities (>= about -1e4 where finite) by the temperature: from 1e-4 the
# quotient stays finite (and the likeliest token's 0 stays 0; a subnormal or zero T made it 0/0 = NaN), and
# past 1e4 every token is equally likely to float32's precision.
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 1e4
_FLAG: Mapping[str, Any] = MappingProxyType({})  # a command-line flag named after the field, its type from the field's


def _option(default, help: str, *, defaultable: bool = False, sampling: bool = False, plain: bool = False,
            cli: Mapping[str, Any] | None = _FLAG, api: bool = True) -> Any:  # fmt: skip
    """A DecodeOptions field whose metadata every surface is generated from (as `HfArgumentParser` reads a
    dataclass's): `help`, one line for the command line's --help and the API's schema; `defaultable`: a run's
    generation.json may set it (how to search, never per-sentence text); `sampling`: it applies only to sampling
    (its default means "off"); `plain`: any other value than the default makes the search more than plain
    greedy or beam search (`DecodeOptions.plain`); `cli`: the flag's argparse keywords beside the generated
    ones (`flag`: its name, default --field-name; `parse`: text -> value, after parsing), None for no flag;
    `api`: the JSON API's `options` take it."""
    meta = {"help": help, "defaultable": defaultable, "sampling": sampling, "plain": plain, "cli": cli, "api": api}
    return field(default=default, metadata=meta)


def head_indices(text: str) -> tuple[int, ...]:
    """align_heads from text, as a command line gives them: "0,2" -> (0, 2); else OptionError.

    Examples:
        >>> head_indices("0,2")
        (0, 2)
    """
    try:
        return tuple(int(h) for h in text.split(","))
    except ValueError:
        raise OptionError(
            f"align_heads must be head indices separated by commas, e.g. 0,2; got {text!r}", "align_heads"
        ) from None


class OptionError(ValueError):
    """A decoding option that cannot decode; `field` is the DecodeOptions field it names."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field

    def named(self, name: str) -> str:
        """The message with the option called `name` (a command line's flag) where it names the field."""
        msg = str(self)
        if msg.startswith(self.field + " "):
            return name + msg[len(self.field) :]
        return f"{name}: {msg}"


@contextmanager
def _field(name: str) -> Iterator[None]:
    """Turn a ValueError raised while checking `name` into an OptionError naming it."""
    try:
        yield
    except OptionError:
        raise
    except ValueError as e:
        msg = str(e)
        own = f"DecodeOptions.{name}"  # check_field_types names the class
        raise OptionError(name + msg[len(own) :] if msg.startswith(own) else msg, name) from None


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode. Text fields (prefix, constraints) are target-language text, encoded by the
    Translator with its target vocabulary. Each field's metadata (`_option`) says what it does and where it
    appears: the command line's flags, the JSON API's options, a run's generation.json.

    prefix: one text for every sentence, or a sequence with one (or None) per sentence.
    constraints: phrases every output must contain: a sequence of texts for every sentence, or a
        sequence of such sequences, one per sentence.
    """

    beam: int = _option(1, f"hypotheses kept per sentence, 1..{MAX_BEAM}; 1 = greedy, the quickest answer",
                         defaultable=True)  # fmt: skip
    n_best: int = _option(1, "hypotheses returned per sentence, best first (<= beam; with sample: samples drawn)",
                          defaultable=True, plain=True, cli={"metavar": "N"})  # fmt: skip
    sample: bool = _option(False, "draw tokens from the model's distribution instead of searching (no beam)",
                           defaultable=True, plain=True)  # fmt: skip
    temperature: float = _option(1.0, "sampling: divides the logits (1e-4 to 1e4; < 1 sharpens, > 1 flattens)",
                                 defaultable=True, sampling=True)  # fmt: skip
    top_k: int = _option(0, "sampling: only the k likeliest tokens (0 = all)", defaultable=True, sampling=True)
    top_p: float = _option(1.0, "sampling: only the smallest set of likeliest tokens holding this probability, (0, 1]",
                           defaultable=True, sampling=True)  # fmt: skip
    seed: int | None = _option(None, "sampling: same seed, input and batch size give the same samples; none = a "
                               "fresh draw", sampling=True)  # fmt: skip
    length_penalty: float = _option(1.0, "scores are log-probability / length ** length_penalty (0..5)",
                                    defaultable=True, cli={"metavar": "ALPHA"})  # fmt: skip
    # beam search: False (Hugging Face's default) goes on after `beam` hypotheses finished while a live one
    # could still beat the worst of them at its current length; True stops there (fairseq's rule)
    early_stopping: bool = _option(False, "beam search stops a sentence once `beam` hypotheses finished (off: goes "
                                   "on while a live one could still beat them, as transformers' generate)",
                                   defaultable=True)  # fmt: skip
    min_len: int = _option(0, "no <eos> before this many output tokens (the prefix counts; below the output limit)",
                           defaultable=True, plain=True)  # fmt: skip
    max_len: int | None = _option(None, "most decoding steps, <eos> included (none = the translator's limit: 2 x "
                                  "source + 10)", defaultable=True, plain=True)  # fmt: skip
    no_repeat_ngram: int = _option(0, "no n-gram of this size occurs twice in an output (0 = off)",
                                   defaultable=True, plain=True, cli={"metavar": "N"})  # fmt: skip
    # one text for every sentence, or a sequence with one (or None) per sentence
    prefix: str | Sequence[str | None] | None = _option(
        None, "target words every output starts with (decoding continues after them)", plain=True,
        cli={"metavar": "TEXT", "type": str},
    )  # fmt: skip
    # a sequence of texts for every sentence, or a sequence of such sequences, one per sentence
    constraints: Sequence[Any] = _option(
        (), "target phrases every output must contain (lexically constrained beam search)", plain=True,
        cli={"flag": "--constraint", "action": "append", "metavar": "PHRASE", "type": str},
    )  # fmt: skip
    align: bool = _option(False, "word alignments (source word i, target word j) from cross-attention")
    align_layer: int | None = _option(None, "decoder layer the alignment reads (none = the run's alignment.json "
                                      "from `attnlab heads`, else the last but one)")  # fmt: skip
    align_heads: Sequence[int] | None = _option(
        None, "heads the alignment averages (none = the run's alignment.json, else all of the layer)",
        cli={"metavar": "H,H", "type": str, "parse": head_indices},
    )  # fmt: skip
    # As Hugging Face's output_scores: a caller that reads only the tokens says so, and greedy skips them.
    scores: bool = _option(True, "compute each output's score; off: greedy skips them (score NaN, same tokens, "
                           "faster); other searches rank by them anyway", cli=None, api=False)  # fmt: skip
    # As Hugging Face's return_dict_in_generate: the search's own record, for the explorer.
    trace: bool = _option(False, "beam search: record every step's candidates into each sentence's best "
                          "Hypothesis (`attnlab.decoding.trace`)", cli=None, api=False)  # fmt: skip

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DecodeOptions:
        """From a JSON body or config: unknown keys and wrong types raise OptionError."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise OptionError(
                f"unknown decoding option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}", unknown[0]
            )
        return cls(**d)

    def merged(self, changes: Mapping[str, Any]) -> DecodeOptions:
        """These options (a run's defaults) with `changes` (a body, flags given, keyword arguments): the one
        rule every surface applies. Sampling without a beam given samples (beam 1); a beam given below the
        defaults' n_best returns as many as it keeps."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise OptionError(
                f"unknown decoding option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}", unknown[0]
            )
        base = dict(changes)
        if base.get("sample") and "beam" not in base:
            base["beam"] = 1
        if not base.get("sample", self.sample) and "n_best" not in base:
            beam = base.get("beam", self.beam)
            if isinstance(beam, int) and not isinstance(beam, bool) and beam >= 1:
                base["n_best"] = min(self.n_best, beam)
        return replace(self, **base)

    def validate(self) -> None:
        """Raise OptionError (one line, naming the option) for values that cannot decode."""
        untyped = {"prefix", "constraints", "align_heads"}  # checked by their own rules below
        for f in fields(self):
            if f.name not in untyped:
                with _field(f.name):
                    check_field_types(type(self), {f.name: getattr(self, f.name)})
        with _field("beam"):
            check_range("beam", self.beam, 1, MAX_BEAM, integer=True)
        self._check_strategy()
        with _field("temperature"):
            check_range("temperature", self.temperature, MIN_TEMPERATURE, MAX_TEMPERATURE, why=" (finite in float32)")
        with _field("top_k"):
            check_range("top_k", self.top_k, 0, integer=True)
        with _field("top_p"):
            check_range("top_p", self.top_p, 0, 1, lo_open=True)
        with _field("seed"):
            check_range("seed", self.seed, 0, SEED_MAX, integer=True, none_ok=True)
        with _field("length_penalty"):
            check_range("length_penalty", self.length_penalty, 0, 5)
        with _field("max_len"):
            check_range("max_len", self.max_len, 1, MAX_OUTPUT_TOKENS, integer=True, none_ok=True)
        with _field("min_len"):
            hi = (self.max_len or MAX_OUTPUT_TOKENS) - 1  # room for the <eos> after them
            why = " (max_len - 1: the <eos> comes after them)" if self.max_len is not None else ""
            check_range("min_len", self.min_len, 0, hi, integer=True, why=why)
        with _field("no_repeat_ngram"):
            check_range("no_repeat_ngram", self.no_repeat_ngram, 0, MAX_NGRAM, integer=True)
        self._check_alignment()
        with _field("prefix"):
            _check_texts("prefix", self.prefix, allow_none=True)
        with _field("constraints"):
            if isinstance(self.constraints, (str, bytes)):
                raise ValueError(f"constraints must be a list of phrases, got one string {self.constraints!r}")
            if not isinstance(self.constraints, (list, tuple)):
                raise ValueError(f"constraints must be a list of phrases, got {self.constraints!r}")
            for c in self.constraints:
                _check_texts("constraints", c, allow_none=False)

    def _check_strategy(self) -> None:
        """The fields that belong to one strategy: sampling's with sample only, beam's without it."""
        if self.sample:
            with _field("n_best"):
                check_range("n_best", self.n_best, 1, MAX_SAMPLES, integer=True, why=" (samples per source)")
            if self.beam != 1:
                raise OptionError(
                    f"sample draws n_best samples per source and takes no beam, got beam={self.beam}", "beam"
                )
            if self.constraints:
                raise OptionError("constraints need beam search; drop sample", "constraints")
            return
        with _field("n_best"):
            check_range("n_best", self.n_best, 1, self.beam, integer=True, why=f" (the beam, {self.beam})")
        changed = [n for n, v, d in self._sampling() if v != d]
        if changed:
            verb = "applies" if len(changed) == 1 else "apply"
            raise OptionError(f"{', '.join(changed)} {verb} only to sampling; add sample (--sample)", changed[0])

    def _check_alignment(self) -> None:
        with _field("align_layer"):
            check_range("align_layer", self.align_layer, 0, integer=True, none_ok=True)
        if self.align_heads is not None:
            if not isinstance(self.align_heads, (list, tuple)) or not self.align_heads:
                raise OptionError(
                    f"align_heads must be a non-empty list of head indices, got {self.align_heads!r}", "align_heads"
                )
            for h in self.align_heads:
                with _field("align_heads"):
                    check_range("align_heads", h, 0, integer=True)
        if (self.align_layer is not None or self.align_heads is not None) and not self.align:
            field = "align_layer" if self.align_layer is not None else "align_heads"
            raise OptionError(
                "align_layer and align_heads choose the alignment's attention; add align (--align)", field
            )

    def _sampling(self) -> list[tuple[str, Any, Any]]:
        return [(f.name, getattr(self, f.name), f.default) for f in option_fields("sampling")]

    @property
    def plain(self) -> bool:
        """True for plain greedy or beam search with one answer: what the explorer's search trace draws (every
        field marked `plain` at its default)."""
        return all(_unset(getattr(self, f.name), f.default) for f in option_fields("plain"))

    def for_sentence(self, i: int, n: int) -> tuple[str | None, list[str]]:
        """Sentence i's (of n) prefix text and constraint phrases, or OptionError if a per-sentence list
        does not have n entries."""
        prefix = self.prefix
        if prefix is not None and not isinstance(prefix, str):
            if len(prefix) != n:
                raise OptionError(
                    f"prefix has {len(prefix)} entries for {n} sentences; give one per sentence", "prefix"
                )
            prefix = prefix[i]
        cons = list(self.constraints)
        if cons and not isinstance(cons[0], str):
            if len(cons) != n:
                raise OptionError(
                    f"constraints has {len(cons)} lists for {n} sentences; give one list per sentence", "constraints"
                )
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


def _unset(value, default) -> bool:
    """`value` is the field's default (an empty list counts as the default empty tuple)."""
    return value == default or (isinstance(value, (list, tuple)) and not value and not default)


def option_fields(marked: str | None = None) -> list[Field]:
    """DecodeOptions' fields in order; with `marked`, those whose metadata sets it (`_option`: "defaultable",
    "sampling", "plain", "api"; "cli": those with a flag).

    Examples:
        >>> [f.name for f in option_fields("sampling")]
        ['temperature', 'top_k', 'top_p', 'seed']
    """
    return [f for f in fields(DecodeOptions) if marked is None or f.metadata[marked] not in (None, False)]


# Fields a run's decoding defaults (generation.json) may set: how to search, never per-sentence text.
DEFAULTABLE = tuple(f.name for f in option_fields("defaultable"))
SAMPLING = tuple(f.name for f in option_fields("sampling"))  # the fields that apply only to sampling
API_OPTIONS = tuple(f.name for f in option_fields("api"))  # what the JSON API's `options` take

# What a translator decodes with when its run records nothing (Marian's generation_config.json: 4 beams).
TRANSLATOR_DEFAULTS = DecodeOptions(beam=4)
