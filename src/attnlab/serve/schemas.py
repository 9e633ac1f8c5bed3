"""Request and response bodies of the HTTP API (they make its OpenAPI schema, which the fuzz test checks)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from attnlab.analysis.explanation import MAX_CHARS
from attnlab.decoding.options import MAX_BEAM, option_fields

MAX_HEADS_OFF = 512  # most [layer, head] pairs per attention kind in one request
# Every option the API takes, with its help, from DecodeOptions' own fields.
OPTIONS_FIELDS = "; ".join(f"{f.name}: {f.metadata['help']}" for f in option_fields("api"))
BEAM_ALIAS = "an alias of options.beam (kept for existing clients; give one or the other, or the same value in both)"


def _utf8(text: str) -> str:
    # JSON may carry lone surrogates ("\ud800"); they are no text, and could not be sent back as UTF-8.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"contains an unpaired UTF-16 surrogate at character {exc.start}; send valid Unicode text"
        ) from None
    return text


Pair = Annotated[list[int], Field(min_length=2, max_length=2, description="[layer, head], both from 0")]


class HeadsOff(BaseModel):
    """Heads to switch off (their output gated to 0 before W_o), per attention kind."""

    model_config = ConfigDict(strict=True, extra="forbid")

    encoder_self: list[Pair] = Field([], max_length=MAX_HEADS_OFF)
    decoder_self: list[Pair] = Field([], max_length=MAX_HEADS_OFF)
    cross: list[Pair] = Field([], max_length=MAX_HEADS_OFF)


class ExplainRequest(BaseModel):
    # strict: a number for text or a string for beam is a client bug worth reporting, not coercing.
    model_config = ConfigDict(strict=True, extra="forbid")

    text: str = Field(description=f"an English sentence, 1 to {MAX_CHARS} characters", examples=["i'm home ."])
    beam: int | None = Field(None, ge=1, le=MAX_BEAM, description=BEAM_ALIAS, json_schema_extra={"deprecated": True})
    heads_off: HeadsOff | None = Field(
        None,
        description="heads masked while translating; a kind, layer or head "
        "the model lacks gets 422 (GET /api/model gives layers and heads)",
    )
    trace: bool = Field(True, description="with beam > 1, return the search step by step (beam_trace)")
    merge_subwords: bool = Field(
        False,
        description="SentencePiece models: join pieces into words (attention "
        "summed over a word's pieces as keys, averaged over them as queries)",
    )
    options: dict[str, Any] | None = Field(
        None,
        description="decoding options, as `attnlab translate` takes them (attnlab.decoding.DecodeOptions): "
        f"{OPTIONS_FIELDS}. Here prefix is a text, constraints a list of phrases; beam and n_best at most the "
        "server's max_beam; fields left out take the run's defaults (GET /api/model `decoding`). "
        "The maps are those of the best hypothesis; `nbest` lists them all, `alignment` (with align) links "
        "words. beam_trace is given only when the options leave the search plain beam search",
        examples=[{"beam": 4, "n_best": 2, "align": True}],
    )

    _check_text = field_validator("text")(_utf8)


class TranslationsRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    texts: list[str] = Field(
        min_length=1,
        description=f"English sentences, each 1 to {MAX_CHARS} characters; "
        "at most the server's max_texts (GET /api/model)",
        examples=[["i'm home .", "go ."]],
    )
    beam: int | None = Field(None, ge=1, le=MAX_BEAM, description=BEAM_ALIAS, json_schema_extra={"deprecated": True})
    options: dict[str, Any] | None = Field(
        None,
        description="decoding options, as `attnlab translate` takes them (attnlab.decoding.DecodeOptions): "
        f"{OPTIONS_FIELDS}. Here prefix is a text, or one per text; constraints phrases, or a list of them "
        "per text; beam and n_best at most the server's max_beam; fields left out take the run's defaults "
        "(GET /api/model `decoding`). "
        "With options the response also holds "
        "`results` (scores, n-best lists, alignments), and the texts are decoded as a batch of their own",
        examples=[{"beam": 4, "n_best": 2, "align": True}],
    )

    @field_validator("texts")
    @classmethod
    def _check_texts(cls, texts: list[str]) -> list[str]:
        for t in texts:
            _utf8(t)
        return texts


class Hypothesis(BaseModel):
    text: str = Field(description="detokenized translation")
    score: float | None = Field(description="log-probability / length ** length_penalty (null: not computed)")
    alignment: list[Pair] | None = Field(
        None, description="[source word, target word] pairs, 0-based, whitespace words (with options.align)"
    )


class TranslationResult(Hypothesis):
    nbest: list[Hypothesis] = Field(description="the n_best hypotheses, best first (this one first)")


class TranslationsResponse(BaseModel):
    translations: list[str] = Field(description="one detokenized translation per text, in order")
    beam: int
    results: list[TranslationResult] | None = Field(None, description="with options: one per text, in order")
    elapsed_ms: float = Field(description="server time from arrival to answer, queueing included")


class AttentionMaps(BaseModel):
    encoder_self: list[list[list[list[float]]]] = Field(description="[layer][head][Ls][Ls] source self-attention")
    decoder_self: list[list[list[list[float]]]] = Field(
        description="[layer][head][Lt][Lt] causal target self-attention"
    )
    cross: list[list[list[list[float]]]] = Field(description="[layer][head][Lt][Ls] encoder–decoder attention")


class BeamCandidate(BaseModel):
    parent: int = Field(description="slot of the previous step's live hypothesis it extends")
    token: int
    text: str = Field(description="the token")
    logprob: float | None = Field(description="log-probability of this token")
    score: float | None = Field(description="total log-probability of the hypothesis")
    norm_score: float | None = Field(description="score / length ** length_penalty (what ranks finished ones)")
    status: str = Field(description="live | finished | pruned | cut (live at the length limit) | impossible")
    slot: int | None = Field(description="its index among this step's live hypotheses (live only)")


class BeamStep(BaseModel):
    step: int
    sentence: int
    candidates: list[BeamCandidate] = Field(description="the 2 x beam best continuations, best first")


class BeamTrace(BaseModel):
    steps: list[BeamStep]
    winner: list[int] | None = Field(description="[step, candidate index] of the returned hypothesis")
    path: list[list[int]] = Field(description="[step, candidate index] of each token of the winner")


class HeadImportance(BaseModel):
    source: str = Field(description="where the values come from (a heads.json, or this translation's confidence)")
    values: dict[str, list[list[float]]] = Field(description="kind -> [layer][head]")


class NBestEntry(BaseModel):
    text: str = Field(description="detokenized translation")
    score: float | None = Field(description="log-probability / length ** length_penalty (null: not finite)")
    finished: bool = Field(description="False if it stopped at the length limit without <eos>")
    constraints_met: bool | None = Field(description="with constraints: it holds every phrase; else null")


class WordAlignment(BaseModel):
    pairs: list[Pair] = Field(description="[source word, target word] pairs, 0-based (Pharaoh i-j)")
    source_words: list[str] = Field(description="the source's whitespace words (what pairs index first)")
    target_words: list[str] = Field(description="the translation's whitespace words (what pairs index second)")
    source_token_words: list[int] = Field(description="the source word of each source token (<eos> aside)")
    target_token_words: list[int] = Field(description="the target word of each output token (<eos> aside)")


class ExplainResponse(BaseModel):
    text: str
    translation: str = Field(description="the detokenized translation")
    src_tokens: list[str] = Field(description="source tokens as the model saw them (<unk> for unknown words, <eos>)")
    tgt_tokens: list[str] = Field(description="the token each decoder position produced (output + <eos>)")
    tgt_input_tokens: list[str] = Field(description="decoder inputs (<bos> + output): keys of decoder self-attention")
    beam: int
    finished: bool = Field(description="False if decoding stopped at the length limit without <eos>")
    attention: AttentionMaps
    heads_off: dict[str, list[list[int]]] = Field(description="the heads that were masked, per kind")
    beam_trace: BeamTrace | None = Field(description="the beam search step by step (beam > 1 and trace)")
    subwords: bool = Field(description="tokens are SentencePiece pieces")
    merged: bool = Field(description="pieces were merged into words")
    importance: HeadImportance
    nbest: list[NBestEntry] = Field(description="the hypotheses found, best first (the maps are the first's)")
    alignment: WordAlignment | None = Field(
        None, description="with options.align: the best hypothesis's word alignment (unmerged tokens only)"
    )
    elapsed_ms: float = Field(description="server time for decoding and recording")


class ModelInfo(BaseModel):
    model_type: str
    model: dict
    origin: str = Field(description="trained here, or imported (from where)")
    parameters: int = Field(description="number of weights")
    heads: dict[str, list[int]] = Field(description="kind -> heads per layer (what heads_off may name)")
    positions: str | None = Field(
        description="how attention knows word order: sinusoidal, learned, rope, alibi, t5 or none; "
        "null for a model without a position scheme (an RNN reads order from its recurrence)"
    )
    num_kv_heads: int | None = Field(
        description="key/value heads per attention as configured: num_heads (multi-head), fewer "
        "(grouped-query) or 1 (multi-query); null for a model without heads"
    )
    importance_source: str = Field(description="what the head-importance strip shows")
    src_vocab_size: int
    tgt_vocab_size: int
    max_source_tokens: int | None = Field(description="longest source accepted, <eos> included")
    max_output_tokens: int
    max_chars: int
    max_beam: int = Field(description="largest beam and n_best this server decodes (--max-beam)")
    decoding: dict = Field(description="the run's decoding defaults (RUN/generation.json): what an option left out is")
    max_texts: int = Field(description="most texts in one POST /api/translations (--max-texts, within the queue)")
    max_body_bytes: int
    max_response_bytes: int = Field(description="the explorer refuses sentences whose attention maps exceed this")
    workers: int
    data_attribution: str


class PositionMaps(BaseModel):
    """What the model's position scheme adds per head for one sentence's lengths (GET /api/positions;
    `attnlab.analysis.positions.position_maps`)."""

    scheme: str | None = Field(description="sinusoidal, learned, rope, alibi, t5 or none; null without a scheme")
    num_heads: int | None = Field(description="H, query heads per attention as configured (before pruning)")
    slopes: list[float] | None = Field(None, description="alibi: each head's slope; bias = -slope * |i - j|")
    encoder_self: list[list[list[float | None]]] | None = Field(
        None, description="alibi, t5: (H, S, S) bias added to the encoder self-attention scores"
    )
    decoder_self: list[list[list[float | None]]] | None = Field(
        None, description="alibi, t5: (H, T, T) bias of the decoder self-attention; null above the diagonal (causal)"
    )
    num_buckets: int | None = Field(None, description="t5: relative-position buckets per stack")
    max_distance: int | None = Field(None, description="t5: distances from here on share the last bucket")
    rot_dim: int | None = Field(None, description="rope: rotated features per head")
    base: float | None = Field(None, description="rope: theta_f = base^(-2f / rot_dim)")
    inv_freq: list[float] | None = Field(None, description="rope: theta_f of each feature pair f, (rot_dim / 2,)")
    angles: list[list[float]] | None = Field(
        None, description="rope: (max(S, T), rot_dim / 2) rotation angle pos * theta_f in radians, alike for every head"
    )


class ErrorResponse(BaseModel):
    detail: str
    request_id: str | None = Field(None, description="quote it when reporting a server error (500)")


class Health(BaseModel):
    status: str


__all__ = [
    "MAX_HEADS_OFF",
    "OPTIONS_FIELDS",
    "AttentionMaps",
    "BeamTrace",
    "ErrorResponse",
    "ExplainRequest",
    "ExplainResponse",
    "HeadImportance",
    "HeadsOff",
    "Health",
    "ModelInfo",
    "NBestEntry",
    "PositionMaps",
    "TranslationsRequest",
    "TranslationsResponse",
    "WordAlignment",
]
