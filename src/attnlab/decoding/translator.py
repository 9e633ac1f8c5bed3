"""Text in, translations out: `Translator` and the one `encode_source` every caller uses.

    text --encode_source--> source ids --Translator.search(options)--> Hypothesis --tgt_vocab.decode--> text

One front door: `translate` / `translate_tokens(sentences, options=...)` (ids: `search`); the options are the
translator's `defaults` (its run's generation.json, else `TRANSLATOR_DEFAULTS`: beam 4) unless given, and
`translator.options(n_best=2)` changes them.

`encode_source` is the single check of an input sentence (type, emptiness, characters, tokens, the
model's source length) for `translate`, `evaluate`, `explain` and the explorer; what it refuses raises
`InputError` (a ValueError), so the CLI prints one line and the server answers 4xx.
"""

from __future__ import annotations

import copy
import math
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from attnlab.attention.positions import SCHEMES
from attnlab.decoding.align import SavedAlignment, align_batch, alignment_heads
from attnlab.decoding.batches import search_batches
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.job import DecodeJob
from attnlab.decoding.options import TRANSLATOR_DEFAULTS, DecodeOptions, OptionError
from attnlab.decoding.targets import holds_phrases, target_ids
from attnlab.inference.precision import PrecisionChoice
from attnlab.utils.checks import check_range
from attnlab.utils.runtime import gc_paused

__all__ = [
    "BATCH_SIZE_BY_PRECISION",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_OUTPUT_LEN",
    "InputError",
    "MAX_LEN_A",
    "MAX_LEN_B",
    "TextTooLong",
    "Translation",
    "Translator",
    "encode_source",
    "model_max_len",
]

DEFAULT_MAX_OUTPUT_LEN = 200  # tokens; fairseq's default max_len_b is of the same order
# The length rule (fairseq's max_len_a, max_len_b): a source of S tokens may produce at most a * S + b tokens.
# Exports write both into their config.json, so the ONNX and browser runtimes read the rule, not repeat it.
MAX_LEN_A, MAX_LEN_B = 2, 10
# Sentences per decoding batch (sorted by length). Per step, a decoding batch pays a fixed cost (~100
# small ops of Python and dispatch) plus work per row; 256 was faster than 128 on the laptop model
# (BENCHMARKS.md, "Precision, int8 and CTranslate2"); sentences that end leave the batch early.
DEFAULT_BATCH_SIZE = 256
# Precisions whose decode measured faster at another size (validation split, BENCHMARKS.md "int8's fused
# step"): int8's step is short enough that a smaller batch's working set staying in cache, and 2 workers
# sharing 17 batches out more evenly than 9, pay (the figures: that section). Same outputs.
BATCH_SIZE_BY_PRECISION = {"int8": 96}
LONG_INPUT_BATCHES = 4  # larger batches while each worker still gets this many (`Translator._default_batch`)
BEAM_ROWS = 768  # ... of at most this many rows of a beam (K a sentence): 192 sentences at beam 4
# On a GPU a step of thousands of rows costs about what one of a few hundred does (launches dominate): sort by
# length and decode in batches of thousands (benchmarks/gpu/gpu_decode.py).
CUDA_BATCH_SIZE = 4096
# What a translator given a model without a precision record decodes: the model itself, in float32.
AS_GIVEN = PrecisionChoice("fp32", "fp32", "the model as given")


class InputError(ValueError):
    """The text cannot be translated as given (empty, too many tokens...); the message says why."""


class TextTooLong(InputError):
    """The text exceeds a character limit (HTTP 413 in the explorer)."""


def encode_source(
    src_vocab, text, max_len: int | None = None, truncate: bool = False, max_chars: int | None = None
) -> list[int]:
    """Source ids of one sentence (without <eos>), or InputError saying what is wrong with it.

    Args:
        max_len: longest source the model takes, in tokens with the <eos>; None = no limit.
        truncate: cut a sentence longer than max_len (with a warning) instead of refusing it.
        max_chars: refuse longer texts before tokenizing them (TextTooLong); None = no limit.

    Examples:
        >>> from attnlab.data import Vocab
        >>> vocab = Vocab([["i'm", "home", "."]], min_freq=1)
        >>> len(encode_source(vocab, "i'm home ."))
        3
        >>> encode_source(vocab, "   ")
        Traceback (most recent call last):
        ...
        attnlab.decoding.translator.InputError: the text is empty; pass an English sentence such as "i'm home ."
    """
    _check_text(text, max_chars)
    return _checked_ids(text, src_vocab.encode(text), max_len, truncate)


def _check_text(text, max_chars: int | None = None) -> None:
    """InputError where `text` is not a string, is blank or is over `max_chars` (`encode_source`)."""
    if not isinstance(text, str):
        raise InputError(f"a sentence must be a string, got {type(text).__name__}")
    blank = not text.strip() or (
        # Cf: zero-width spaces, joiners, marks of direction: invisible, so a text of them is blank too
        not text.isascii() and all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)
    )
    if blank:
        raise InputError('the text is empty; pass an English sentence such as "i\'m home ."')
    if max_chars is not None and len(text) > max_chars:
        raise TextTooLong(f"the text has {len(text)} characters; at most {max_chars} are accepted")


def _checked_ids(text: str, ids: list[int], max_len: int | None, truncate: bool) -> list[int]:
    """`text`'s source ids within max_len (cut with a warning under `truncate`), or InputError (`encode_source`)."""
    if not ids:
        raise InputError(f"{text[:60]!r} has no tokens after preprocessing; pass some English words")
    if max_len is None or len(ids) + 1 <= max_len:
        return ids
    if not truncate:
        raise InputError(
            f"the sentence {text[:60]!r} has {len(ids)} tokens (+1 <eos>) but this model takes at most "
            f"{max_len} (its max_len); shorten it, or pass truncate=True (--truncate) to cut it"
        )
    warnings.warn(f"truncating a {len(ids)}-token sentence to the model's max_len {max_len}", stacklevel=3)
    return ids[: max_len - 1]


@dataclass
class Translation:
    """One translated sentence, with the tokens the model actually saw and produced (for the explorer)."""

    source: str
    src_tokens: list[str]  # source tokens after the vocabulary (unknown words -> <unk>), + <eos>
    tgt_tokens: list[str]  # produced target tokens, without <bos>/<eos>
    text: str  # detokenized translation
    finished: bool = True  # False: decoding stopped at the length limit, not at <eos>
    score: float = math.nan  # log-probability / length ** length_penalty (NaN: not computed)
    alignment: list[tuple[int, int]] | None = None  # (source word, target word) pairs, with options.align
    nbest: list[Translation] = field(default_factory=list)  # with options: the n_best hypotheses, this first


def model_max_len(cfg: dict) -> int | None:
    """Longest source (tokens, <eos> included) a run's model accepts: the size of a learned position
    table, the book's fixed sequence length (`num_steps`) for runs trained that way, else the
    Transformer's `max_len`. Sinusoidal positions extend to any length, so sentences longer than the
    training ones are accepted (quality falls off gradually, which the explorer lets you watch);
    an RNN (Bahdanau) without fixed lengths has no limit (None)."""
    model, train = cfg.get("model", {}), cfg.get("train", {})
    if getattr(SCHEMES.get(model.get("positions", "")), "bounded", False):  # a learned table
        return int(model["max_len"])
    if train.get("num_steps"):
        return int(train["num_steps"])
    return model.get("max_len")


class Translator:
    """A trained model with its vocabularies: sentences in, translations out.

    Args:
        model, src_vocab, tgt_vocab: what `attnlab.runs.load_translator` reads from a run folder.
        config: the run's config.json contents.
        max_len: longest source (tokens, <eos> included) accepted; None = no limit.
        max_output_len: hard cap on a translation's length in tokens (default 200); within it a
            sentence of S source tokens may produce at most MAX_LEN_A * S + MAX_LEN_B (2 * S + 10), and
            never more than the decoder has positions for (`model.max_target_positions`), so an
            undertrained model that never says <eos> still stops soon.
        precision: what the model was converted to and why (`attnlab.inference.decoding_model` converts it and
            makes this record; `load_translator` does both); default: fp32, the model as given.
        defaults: the decoding options used where a call gives none (a run's generation.json; default
            `TRANSLATOR_DEFAULTS`, beam 4).

    Examples:
        >>> import torch
        >>> from attnlab.data import Vocab
        >>> from attnlab.models import Transformer, TransformerConfig
        >>> src = Vocab([["go", "."]], min_freq=1); tgt = Vocab([["va", "!"]], min_freq=1)
        >>> _ = torch.manual_seed(0)
        >>> model = Transformer(TransformerConfig(len(src), len(tgt), num_hiddens=8, num_heads=2,
        ...                                       num_layers=1, ffn_num_hiddens=16))
        >>> translator = Translator(model, src, tgt)
        >>> out = translator.translate(["go ."], options=translator.options(beam=2))   # untrained: French-ish tokens
        >>> isinstance(out[0], str), translator.output_limit(3), translator.defaults.beam
        (True, 16, 4)
    """

    def __init__(
        self,
        model: nn.Module,
        src_vocab,
        tgt_vocab,
        config: dict | None = None,
        device="cpu",
        max_len: int | None = None,
        *,
        max_output_len: int | None = None,
        precision: PrecisionChoice = AS_GIVEN,
        defaults: DecodeOptions | None = None,
    ):
        if not isinstance(precision, PrecisionChoice):
            raise TypeError(
                f"precision must be the PrecisionChoice the model was converted with, got {precision!r}; convert "
                "the model with attnlab.inference.decoding_model(model, precision, device), which returns both"
            )
        self.model = model.to(device).eval()  # decoding never wants dropout
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.config = config or {}
        self.device = torch.device(device)
        self.max_len = max_len
        self.max_output_len = max_output_len or DEFAULT_MAX_OUTPUT_LEN
        self.precision = precision  # what decodes and why
        self.workers: int | None = None  # batches decoded at once by `decode`; None: one per torch thread
        # sentences per batch when a call gives none
        self.batch_size = BATCH_SIZE_BY_PRECISION.get(precision.picked, DEFAULT_BATCH_SIZE)
        if self.device.type == "cuda":
            self.batch_size, self.workers = CUDA_BATCH_SIZE, 1  # one stream: batches one after another
        # The static-shape decoding step ('static', 'graphs', 'compile': attnlab.decoding.static) or None (dynamic).
        self.static_step: str | None = None
        self.alignment: SavedAlignment | None = None  # a run's alignment.json: the default layer and heads of align
        self.defaults = TRANSLATOR_DEFAULTS if defaults is None else defaults  # what a call without options decodes

    def options(self, **changes) -> DecodeOptions:
        """The translator's default options with `changes` (`DecodeOptions.merged`: sample alone samples)."""
        return self.defaults.merged(changes)

    def alignment_heads(self, layer: int | None = None, heads=None) -> tuple[int, list[int]]:
        """The (layer, heads) an alignment reads: those given, else the run's alignment.json, else the
        last-but-one layer's heads (`attnlab.decoding.align.alignment_heads`)."""
        return alignment_heads(self.model, layer, heads, self.alignment)

    def job(self) -> DecodeJob:
        """What decoding needs of this translator as it is now (model, tokens, device, the length rule
        MAX_LEN_A * S + MAX_LEN_B, the static step): what the batcher and its workers take."""
        return DecodeJob(
            self.model, bos=self.bos, eos=self.tgt_vocab.eos, src_eos=self.src_vocab.eos, src_pad=self.src_vocab.pad,
            device=self.device, max_len_a=MAX_LEN_A, max_len_b=MAX_LEN_B, max_output_len=self.max_output_len,
            static_step=self.static_step, tgt_vocab=self.tgt_vocab,
        )  # fmt: skip

    def output_limit(self, src_len: int, max_len: int | None = None) -> int:
        """Most tokens decoded for a source of `src_len` tokens (<eos> included): `DecodeJob.output_limit`
        (MAX_LEN_A * src_len + MAX_LEN_B within max_output_len, or `max_len`, within the decoder's positions)."""
        return self.job().output_limit(src_len, max_len)

    @property
    def bos(self) -> int:
        """The decoder's first input: the target <bos>, or the model's own start token (Marian: <pad>)."""
        start_token = getattr(getattr(self.model, "config", None), "decoder_start_token", None)
        return self.tgt_vocab.bos if start_token is None else start_token

    def encode(self, sentences: Sequence[str], truncate: bool = False) -> list[list[int]]:
        """Sentences -> source id lists (no <eos>), each checked by `encode_source`."""
        if isinstance(sentences, str):
            raise InputError("translate expects a list of sentences, got one string; wrap it in a list")
        for s in sentences:
            _check_text(s)
        # One call for every sentence (the tokenizer's batch encoder: no Python call per sentence), then each checked.
        ids = self.src_vocab.encode_batch(sentences)
        return [_checked_ids(s, i, self.max_len, truncate) for s, i in zip(sentences, ids)]

    def search(
        self,
        src_ids: Sequence[Sequence[int]],
        options: DecodeOptions | None = None,
        *,
        batch_size: int | None = None,
        workers: int | None = None,
        texts: bool = False,
    ) -> list[list[Hypothesis]]:
        """Source id lists (no <eos>) -> options.n_best hypotheses each (default: `self.defaults`), best first,
        in input order; batched, longest first. `options.scores=False`: greedy skips the scores (NaN; same tokens,
        faster); `options.trace`: beam search's record on each best hypothesis (`Hypothesis.trace`).

        Each output holds its constraint phrases: a hypothesis cut at the length limit without them is left
        out, and a sentence none of whose hypotheses holds them is an OptionError (raise max_len).

        Args:
            batch_size: sentences per batch (default `self.batch_size`: DEFAULT_BATCH_SIZE, or the
                precision's own in BATCH_SIZE_BY_PRECISION, larger on long inputs: `_default_batch`).
            workers: decode this many batches at once, each on one torch thread: in this process and
                forked worker processes kept for later calls, or in threads where forking is not safe
                (`attnlab.decoding.batches`); default `self.workers`, whose default None means one per
                torch thread; 1: batches one after another on torch's intra-op threads.
            texts: each hypothesis detokenized too (`Hypothesis.text`), by whichever worker decoded it.
        """
        options = self.defaults if options is None else options
        workers = self.workers if workers is None else workers
        if batch_size is None:
            batch_size = self._default_batch(len(src_ids), options, workers)
        batch_size = check_range("batch_size", batch_size, 1, integer=True)
        # Paused from the first per-sentence list to the last hypothesis: a full collection that thousands of
        # them set off walks every object a loaded model and torch keep (~0.14 s for the laptop model, a
        # seventh of 3,000 greedy sentences' time on one thread), and finds no cycle.
        with gc_paused():
            prefixes, constraints = self.encode_targets(src_ids, options)
            nbest = search_batches(
                self.job(), src_ids, options, prefixes, constraints, batch_size=batch_size, workers=workers,
                texts=texts,
            )  # fmt: skip
            for i, (hs, cs) in enumerate(zip(nbest, constraints)):
                if cs:
                    nbest[i] = _holding(hs, cs, i, self.output_limit(len(src_ids[i]) + 1, options.max_len))
            return nbest

    def _default_batch(self, n: int, options: DecodeOptions, workers: int | None) -> int:
        """`self.batch_size`, or more sentences where that still gives every worker LONG_INPUT_BATCHES batches
        (in steps of 32), up to DEFAULT_BATCH_SIZE and BEAM_ROWS rows; several samples per sentence keep it.

        A batch runs until its longest output ends, a step of a few rows costing nearly what one of many does,
        while smaller batches share out more evenly among the workers. The laptop model, int8, 2 workers, median
        time: 1,558 sentences, sampling top-k 10 7 % less in batches of 128-192 than of 96, greedy 3-5 %, beam 4
        5-8 % in batches of 192; 10,000 sentences, sampling 8-15 % less in batches of 192-256, greedy within the
        noise; 9,348 sentences, beam 4 at 96-192 within the noise; beam 4 at 256 11-18 % slower than at 96-192."""
        size, rows = self.batch_size, options.n_best if options.sample else options.beam  # rows a sentence
        if size >= DEFAULT_BATCH_SIZE or (options.sample and rows > 1):
            return size
        share = n // (LONG_INPUT_BATCHES * (workers or torch.get_num_threads())) // 32 * 32
        return max(size, min(DEFAULT_BATCH_SIZE, BEAM_ROWS // rows, share))

    def encode_targets(
        self, src_ids: Sequence[Sequence[int]], options: DecodeOptions
    ) -> tuple[list[list[int]], list[list[list[int]]]]:
        """Each sentence's prefix and constraint phrases as target ids (`options.target_ids`, within each
        sentence's output limit)."""
        job = self.job()  # once: thousands of sentences share it
        limits = [job.output_limit(len(ids) + 1, options.max_len) for ids in src_ids]
        return target_ids(self.tgt_vocab, options, limits)

    def translate(
        self, sentences: Sequence[str], truncate: bool = False, *, options: DecodeOptions | None = None
    ) -> list[str]:
        """English sentences -> French translations (detokenized, lowercase as the corpus is trained): the best
        hypothesis of each under `options` (default: `self.defaults`)."""
        options = replace(self.defaults if options is None else options, scores=False)  # the text alone
        return [t.text for t in self.translate_tokens(sentences, truncate, options=options)]

    def translate_tokens(
        self,
        sentences: Sequence[str],
        truncate: bool = False,
        *,
        options: DecodeOptions | None = None,
        src_ids: Sequence[Sequence[int]] | None = None,
    ) -> list[Translation]:
        """Like `translate`, also returning the source and target tokens (axis labels for attention maps),
        each Translation's score (NaN for greedy under `options.scores=False`), alignment (options.align) and
        `nbest`. `src_ids`: the sentences as `encode` returned them, where the caller has them already (a file
        checked whole before decoding): not encoded again."""
        if src_ids is not None and len(src_ids) != len(sentences):
            raise ValueError(f"src_ids must hold one id list per sentence: {len(src_ids)} for {len(sentences)}")
        options = self.defaults if options is None else options
        with gc_paused():  # tens of thousands of acyclic objects: the collector would walk the model's at each pass
            return self._translate_tokens(sentences, truncate, options, src_ids)

    def _translate_tokens(
        self, sentences: Sequence[str], truncate: bool, options: DecodeOptions, src_ids: Sequence[Sequence[int]] | None
    ) -> list[Translation]:
        src_ids = self.encode(sentences, truncate) if src_ids is None else src_ids
        heads = self.alignment_heads(options.align_layer, options.align_heads) if options.align else None
        nbest = self.search(src_ids, options, texts=True)
        aligned: list = [[None] * len(h) for h in nbest]
        if heads is not None:
            flat = [(i, k) for i, hs in enumerate(nbest) for k in range(len(hs))]
            texts, sources = [sentences[i] for i, _ in flat], [src_ids[i] for i, _ in flat]
            pairs = align_batch(self, texts, sources, [nbest[i][k].tokens for i, k in flat], *heads)
            for (i, k), a in zip(flat, pairs):
                aligned[i][k] = a
        out = []
        for s, ids, hs, al in zip(sentences, src_ids, nbest, aligned):
            src_tokens = self.src_vocab.to_tokens(ids) + ["<eos>"]
            items = [self._translation(s, src_tokens, h, a) for h, a in zip(hs, al)]
            # The first again, holding the list (the list's own first holds none: no cycle).
            first = copy.copy(items[0])
            first.nbest = items
            out.append(first)
        return out

    def _translation(self, source: str, src_tokens, h: Hypothesis, alignment=None) -> Translation:
        tokens = self.tgt_vocab.to_tokens(h.tokens)
        text = self.tgt_vocab.decode(h.tokens) if h.text is None else h.text
        return Translation(source, src_tokens, tokens, text, h.finished, h.score, alignment)


def _holding(hyps: list[Hypothesis], phrases: list[list[int]], i: int, limit: int) -> list[Hypothesis]:
    """The hypotheses that hold every phrase (the check every constrained output passes), or OptionError."""
    kept = [h for h in hyps if holds_phrases(h.tokens, phrases)]
    if not kept:
        raise OptionError(
            f"no translation of sentence {i} within its limit of {limit} tokens holds every constraint (the "
            "other options may forbid them); raise max_len, or drop or shorten a constraint",
            "constraints",
        )
    return kept
