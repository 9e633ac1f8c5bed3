"""A SentencePiece vocabulary (the `sentencepiece` library) behind the interface of `Vocab`.

This is how Marian / OPUS-MT models tokenize: a SentencePiece model cuts text into pieces, and a
separate piece -> id table (Marian's `vocab.json`) numbers them, so ids need not be SentencePiece's own.
Pieces missing from the table map to <unk>, as `MarianTokenizer` does.

Same interface as `Vocab`: `encode(text)` (no <bos>/<eos>), `decode(ids)` (stops at <eos>, skips
<pad>/<bos>), `to_tokens`, `to_indices`, `len()`, `.unk .pad .bos .eos`, `save(path)` / `load(path)`.
The saved JSON holds the SentencePiece model itself (base64), so a run folder stays self-contained.

`bos` is the token the decoder starts from: Marian has no <bos> and starts from <pad>
(`decoder_start_token_id`), so its vocabularies name <pad> in that role.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Mapping, Sequence

from attnlab.utils.files import atomic_write_text, read_json_object

FORMAT = "attnlab.SentencePieceVocab"
_ROLES = ("unk", "pad", "bos", "eos")


def _as_list(ids) -> list[int]:
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    return [ids] if isinstance(ids, int) else list(ids)


def _processor(model_proto: bytes, source: str):
    try:
        import sentencepiece as spm
    except ImportError as exc:  # the [hf] extra
        raise ValueError(
            "this vocabulary needs the sentencepiece package; install it with `pip install 'attnlab[hf]'`"
        ) from exc
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(model_proto)
    except (RuntimeError, TypeError) as exc:  # sentencepiece's C++ parser reports a bad proto so
        raise ValueError(
            f"{source} is not a SentencePiece model (its bytes do not parse); use the .spm/.model file "
            f"the tokenizer was trained with, e.g. the source.spm that MarianTokenizer.save_pretrained writes"
        ) from exc
    return sp


def _not_text(text) -> str:
    if not isinstance(text, str):
        return f"SentencePieceVocab.encode takes a str, got {type(text).__name__}"
    at = next((i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF), None)
    return (
        f"the text holds {text[at]!r} at character {at}, which is not a Unicode character (input bytes "
        f"that are not UTF-8); decode the input as UTF-8, or replace its bad bytes"
        if at is not None
        else f"sentencepiece could not encode the text {text[:60]!r}"
    )


class SentencePieceVocab:
    """SentencePiece pieces numbered by an explicit table.

    Args:
        model_proto: the serialized SentencePiece model (the bytes of a `.spm` / `.model` file).
        tokens: id -> token string; None = the SentencePiece model's own numbering.
        specials: role ('unk', 'pad', 'bos', 'eos') -> token string; roles left out are absent
            (asking for them raises ValueError).
        lang: language code, informational (shown in the explorer).
    """

    kind = "spm"

    def __init__(
        self,
        model_proto: bytes,
        tokens: Sequence[str] | None = None,
        specials: Mapping[str, str] | None = None,
        *,
        lang: str | None = None,
        source: str = "the SentencePiece model",
    ):
        self.model_proto = bytes(model_proto)
        self.sp = _processor(self.model_proto, source)
        if tokens is None:
            tokens = [self.sp.IdToPiece(i) for i in range(self.sp.GetPieceSize())]
        self.idx_to_token = list(tokens)
        self.token_to_idx = {t: i for i, t in enumerate(self.idx_to_token)}
        if len(self.token_to_idx) != len(self.idx_to_token):
            raise ValueError("SentencePieceVocab: the token table has duplicate tokens")
        if specials is None:
            specials = {"unk": "<unk>", "pad": "<pad>", "bos": "<s>", "eos": "</s>"}
        unknown = sorted(set(specials) - set(_ROLES))
        if unknown:
            raise ValueError(f"SentencePieceVocab: unknown special roles {unknown}; expected some of {_ROLES}")
        self.specials = {r: t for r, t in specials.items() if t is not None}
        for role, tok in self.specials.items():
            if tok not in self.token_to_idx:
                raise ValueError(f"SentencePieceVocab: the {role} token {tok!r} is not in the token table")
        if "unk" not in self.specials:
            raise ValueError("SentencePieceVocab needs an unk token (pieces outside the table map to it)")
        self.lang = lang

    @classmethod
    def from_file(
        cls,
        spm_path: str | os.PathLike,
        tokens: Sequence[str] | None = None,
        specials: Mapping[str, str] | None = None,
        *,
        lang: str | None = None,
    ) -> SentencePieceVocab:
        path = os.fspath(spm_path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"SentencePiece model {path} does not exist")
        with open(path, "rb") as f:
            return cls(f.read(), tokens, specials, lang=lang, source=path)

    # -- specials ---------------------------------------------------------------------------------
    def _special(self, role: str) -> int:
        tok = self.specials.get(role)
        if tok is None:
            raise ValueError(f"this SentencePiece vocabulary has no {role} token; give one in specials")
        return self.token_to_idx[tok]

    unk = property(lambda self: self._special("unk"))
    pad = property(lambda self: self._special("pad"))
    bos = property(lambda self: self._special("bos"))
    eos = property(lambda self: self._special("eos"))

    # -- lookups ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __contains__(self, token: str) -> bool:
        return token in self.token_to_idx

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, SentencePieceVocab)
            and self.model_proto == other.model_proto
            and self.idx_to_token == other.idx_to_token
            and self.specials == other.specials
        )

    def __repr__(self) -> str:
        return f"SentencePieceVocab(size={len(self)}, lang={self.lang!r})"

    def __getitem__(self, tokens):
        return self.to_indices(tokens)

    def to_indices(self, tokens):
        unk = self.unk
        if isinstance(tokens, str):
            return self.token_to_idx.get(tokens, unk)
        return [self.token_to_idx.get(t, unk) for t in tokens]

    def to_tokens(self, indices):
        if isinstance(indices, int) or (hasattr(indices, "ndim") and indices.ndim == 0):
            return self.idx_to_token[int(indices)]
        return [self.idx_to_token[i] for i in _as_list(indices)]

    # -- text ---------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Raw text -> ids (no <bos>/<eos>); text is not lowercased (SentencePiece models are cased)."""
        try:
            pieces = self.sp.encode(text, out_type=str)
        except (RuntimeError, TypeError) as exc:
            # sentencepiece takes UTF-8: lone surrogates (undecodable input bytes kept by Python's
            # surrogateescape) have no UTF-8 form.
            raise ValueError(_not_text(text)) from exc
        return self.to_indices(pieces)

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        """ids -> text: stops at <eos>, skips <pad>/<bos>, joins pieces with SentencePiece."""
        stop = self.token_to_idx.get(self.specials.get("eos", ""), None)
        drop = {self.token_to_idx[t] for r, t in self.specials.items() if r in ("pad", "bos")}
        pieces = []
        for i in _as_list(ids):
            if i == stop:
                break
            if i not in drop:
                pieces.append(self.idx_to_token[i])
        return self.sp.decode_pieces(pieces).replace("\u2581", " ").strip()

    def reference_text(self, text: str) -> str:
        """A corpus sentence as decoded hypotheses read (SentencePiece decodes to cased, detokenized
        text: only whitespace is normalised), so BLEU compares like with like."""
        return " ".join(text.split())

    # -- files ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": 1,
            "kind": self.kind,
            "lang": self.lang,
            "specials": self.specials,
            "idx_to_token": self.idx_to_token,
            "model": base64.b64encode(self.model_proto).decode("ascii"),
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write as one JSON file (the SentencePiece model inside, base64), atomically."""
        atomic_write_text(path, json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def from_dict(cls, obj: dict, source: str = "<dict>") -> SentencePieceVocab:
        if obj.get("format") != FORMAT or not isinstance(obj.get("model"), str):
            raise ValueError(f"{source}: not an attnlab SentencePiece vocabulary (expected format {FORMAT!r})")
        try:
            proto = base64.b64decode(obj["model"], validate=True)
        except ValueError as exc:
            raise ValueError(f"{source}: its SentencePiece model is not base64 ({exc}); restore the file") from exc
        return cls(proto, obj.get("idx_to_token"), obj.get("specials"), lang=obj.get("lang"), source=source)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SentencePieceVocab:
        return cls.from_dict(read_json_object(path), source=str(path))
