"""Request and response bodies of the HTTP API (they make its OpenAPI schema, which the fuzz test checks)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from attnlab.explain import MAX_CHARS

MAX_BEAM = 8


def _utf8(text: str) -> str:
    # JSON may carry lone surrogates ("\ud800"); they are no text, and could not be sent back as UTF-8.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"contains an unpaired UTF-16 surrogate at character {exc.start}; send valid Unicode "
                         "text") from None
    return text


class TranslateRequest(BaseModel):
    # strict: a number for text or a string for beam is a client bug worth reporting, not coercing.
    model_config = ConfigDict(strict=True, extra="forbid")

    text: str = Field(description=f"an English sentence, 1 to {MAX_CHARS} characters", examples=["i'm home ."])
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="beam size; 1 = greedy decoding")

    _check_text = field_validator("text")(_utf8)


class TranslationsRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    texts: list[str] = Field(min_length=1, description=f"English sentences, each 1 to {MAX_CHARS} characters; "
                             "at most the server's max_texts (GET /api/model)", examples=[["i'm home .", "go ."]])
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="beam size; 1 = greedy decoding")

    @field_validator("texts")
    @classmethod
    def _check_texts(cls, texts: list[str]) -> list[str]:
        for t in texts:
            _utf8(t)
        return texts


class TranslationsResponse(BaseModel):
    translations: list[str] = Field(description="one detokenized French translation per text, in order")
    beam: int
    elapsed_ms: float = Field(description="server time from arrival to answer, queueing included")


class AttentionMaps(BaseModel):
    encoder_self: list[list[list[list[float]]]] = Field(description="[layer][head][Ls][Ls] source self-attention")
    decoder_self: list[list[list[list[float]]]] = Field(
        description="[layer][head][Lt][Lt] causal target self-attention")
    cross: list[list[list[list[float]]]] = Field(description="[layer][head][Lt][Ls] encoder–decoder attention")


class TranslateResponse(BaseModel):
    text: str
    translation: str = Field(description="the detokenized translation")
    src_tokens: list[str] = Field(description="source tokens as the model saw them (<unk> for unknown words, <eos>)")
    tgt_tokens: list[str] = Field(description="the token each decoder position produced (output + <eos>)")
    tgt_input_tokens: list[str] = Field(description="decoder inputs (<bos> + output): keys of decoder self-attention")
    beam: int
    finished: bool = Field(description="False if decoding stopped at the length limit without <eos>")
    attention: AttentionMaps
    elapsed_ms: float = Field(description="server time for decoding and recording")


class ModelInfo(BaseModel):
    model_type: str
    model: dict
    src_vocab_size: int
    tgt_vocab_size: int
    max_source_tokens: int | None = Field(description="longest source accepted, <eos> included")
    max_output_tokens: int
    max_chars: int
    max_beam: int
    max_texts: int = Field(description="most texts in one POST /api/translations")
    max_body_bytes: int
    max_response_bytes: int = Field(description="the explorer refuses sentences whose attention maps exceed this")
    workers: int
    data_attribution: str


class ErrorResponse(BaseModel):
    detail: str
    request_id: str | None = Field(None, description="quote it when reporting a server error (500)")


class Health(BaseModel):
    status: str


__all__ = ["MAX_BEAM", "AttentionMaps", "ErrorResponse", "Health", "ModelInfo", "TranslateRequest",
           "TranslateResponse", "TranslationsRequest", "TranslationsResponse"]
