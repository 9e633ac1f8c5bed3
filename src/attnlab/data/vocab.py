"""Vocabularies: the book's word-level `Vocab` and a byte-pair-encoding `SubwordVocab`.

Both share one interface so the rest of attnlab never asks which it holds:
`encode(text) -> ids` (no <bos>/<eos>), `decode(ids) -> text` (stops at <eos>, skips <pad>/<bos>),
`to_tokens`, `to_indices`, `len()`, `.unk .pad .bos .eos`, `save(path)` / `load(path)` (JSON).
Index order for the default reserved tokens: <unk>=0, <pad>=1, <bos>=2, <eos>=3 (as in the book).
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable, Mapping, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from attnlab.utils.files import atomic_write_text, read_json_object

from .spm import FORMAT as SPM_FORMAT
from .spm import SentencePieceVocab
from .text import detokenize, preprocess, tokenize

UNK = "<unk>"
DEFAULT_RESERVED = ("<pad>", "<bos>", "<eos>")
_FORMAT = "attnlab.Vocab"


def _as_list(ids) -> list[int]:
    """Accept a list, a tuple, a numpy array or a 1-D tensor of ids."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, int):
        return [ids]
    return list(ids)


class _SpecialsMixin:
    """`.pad .bos .eos .unk` as indices, with an error that says which token is missing."""

    def _special_index(self, token: str) -> int | None:
        raise NotImplementedError  # each vocabulary knows where its specials are

    def _special(self, token: str) -> int:
        idx = self._special_index(token)
        if idx is None:
            raise ValueError(f"this vocabulary has no {token} token; build it with reserved=(..., {token!r})")
        return idx

    @property
    def unk(self) -> int:
        return self._special(UNK)

    @property
    def pad(self) -> int:
        return self._special("<pad>")

    @property
    def bos(self) -> int:
        return self._special("<bos>")

    @property
    def eos(self) -> int:
        return self._special("<eos>")

    def _strip_specials(self, ids) -> list[int]:
        """Cut at the first <eos>, drop <pad>/<bos>: what a decoded hypothesis should show."""
        ids = _as_list(ids)
        eos, drop = self._special_index("<eos>"), {self._special_index("<pad>"), self._special_index("<bos>")}
        out = []
        for i in ids:
            if i == eos:
                break
            if i not in drop:
                out.append(i)
        return out


class Vocab(_SpecialsMixin):
    """Word-level vocabulary, as the book's `d2l.Vocab`.

    Args:
        tokens: a flat list of tokens or a list of token lists (sentences).
        min_freq: tokens seen fewer times map to <unk>.
        reserved: special tokens placed right after <unk>, in this order.
        lang: 'en' / 'fr' / None, only used by `decode` to choose the detokenization rules.

    Index order is stable: <unk>, the reserved tokens, then the rest by frequency (descending), ties
    alphabetically, so the same corpus always gives the same ids.
    """

    kind = "word"

    def __init__(
        self,
        tokens: Iterable | None = None,
        min_freq: int = 2,
        reserved: Sequence[str] = DEFAULT_RESERVED,
        *,
        lang: str | None = None,
    ):
        tokens = list(tokens or [])
        if tokens and isinstance(tokens[0], (list, tuple)):
            tokens = [tok for line in tokens for tok in line]
        counts = collections.Counter(tokens)
        self._init_from_counts(counts, min_freq, reserved, lang)

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[str, int],
        min_freq: int = 2,
        reserved: Sequence[str] = DEFAULT_RESERVED,
        *,
        lang: str | None = None,
    ) -> Vocab:
        """Build from precomputed token counts (what the corpus loader does: counting is its fast part)."""
        vocab = cls.__new__(cls)
        vocab._init_from_counts(counts, min_freq, reserved, lang)
        return vocab

    def _init_from_counts(self, counts, min_freq, reserved, lang):
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        self.min_freq = int(min_freq)
        self.reserved = tuple(reserved)
        self.lang = lang
        self.token_freqs = sorted(((t, int(c)) for t, c in counts.items()), key=lambda tc: (-tc[1], tc[0]))
        specials = [UNK] + [t for t in self.reserved if t != UNK]
        seen = set(specials)
        words = [t for t, c in self.token_freqs if c >= self.min_freq and t not in seen]
        self._set_tokens(specials + words)

    def _set_tokens(self, idx_to_token: list[str]) -> None:
        self.idx_to_token = list(idx_to_token)
        self.token_to_idx = {t: i for i, t in enumerate(self.idx_to_token)}
        if len(self.token_to_idx) != len(self.idx_to_token):
            raise ValueError("vocabulary has duplicate tokens")
        if self.idx_to_token[:1] != [UNK]:
            raise ValueError(f"vocabulary must start with {UNK}, got {self.idx_to_token[:1]}")
        self._unk = 0

    def _special_index(self, token: str) -> int | None:
        return self.token_to_idx.get(token)

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __contains__(self, token: str) -> bool:
        return token in self.token_to_idx

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocab) and self.idx_to_token == other.idx_to_token

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, min_freq={self.min_freq}, lang={self.lang!r})"

    def __getitem__(self, tokens):
        """The book's lookup: a token -> its index, a list of tokens -> a list of indices."""
        return self.to_indices(tokens)

    def to_indices(self, tokens):
        if isinstance(tokens, str):
            return self.token_to_idx.get(tokens, self._unk)
        get, unk = self.token_to_idx.get, self._unk
        return [get(t, unk) for t in tokens]

    def to_tokens(self, indices):
        if isinstance(indices, int) or (hasattr(indices, "ndim") and indices.ndim == 0):
            return self.idx_to_token[int(indices)]
        return [self.idx_to_token[i] for i in _as_list(indices)]

    def encode(self, text: str) -> list[int]:
        """Raw text -> ids with the book's tokenization; no <bos>/<eos> added."""
        return self.to_indices(tokenize(text))

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        """ids (list or 1-D tensor) -> display text: stops at <eos>, skips <pad>/<bos>, detokenizes."""
        return detokenize(self.to_tokens(self._strip_specials(ids)), lang=self.lang)

    def to_dict(self) -> dict:
        return {
            "format": _FORMAT,
            "version": 1,
            "kind": self.kind,
            "lang": self.lang,
            "min_freq": self.min_freq,
            "reserved": list(self.reserved),
            "idx_to_token": self.idx_to_token,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write as JSON, atomically."""
        atomic_write_text(path, json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def from_dict(cls, obj: dict, source: str = "<dict>") -> Vocab:
        if obj.get("format") != _FORMAT or "idx_to_token" not in obj:
            raise ValueError(f"{source}: not an attnlab word vocabulary (expected format {_FORMAT!r})")
        vocab = cls.__new__(cls)
        vocab.min_freq = obj.get("min_freq", 1)
        vocab.reserved = tuple(obj.get("reserved", DEFAULT_RESERVED))
        vocab.lang = obj.get("lang")
        vocab.token_freqs = []  # counts are not saved: the vocabulary itself is what must round-trip
        vocab._set_tokens(obj["idx_to_token"])
        return vocab

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        return cls.from_dict(read_json_object(path), source=str(path))


class SubwordVocab(_SpecialsMixin):
    """Byte-pair-encoding vocabulary (Hugging Face `tokenizers`), one shared for source and target.

    Text goes through the same `preprocess` as the word vocabulary first (lowercase, punctuation
    split off), so BPE and word runs see the same text and are scored the same way. Words are marked
    with the Metaspace '▁' so decoding restores the spaces exactly.

    Build with `SubwordVocab.train(texts, vocab_size=8000)`; `save` writes the tokenizer's own JSON.
    """

    kind = "bpe"

    def __init__(self, tokenizer, lang: str | None = None, style: str = "book"):
        if style not in ("book", "plain"):
            raise ValueError(f"SubwordVocab style must be 'book' or 'plain', got {style!r}")
        self.tokenizer = tokenizer
        self.lang = lang
        # 'book': the book's preprocess/detokenize around the tokenizer (en-fr); 'plain': the tokenizer's
        # own normalizer (Unicode NFC/NFKC) and decoder do everything, for any language pair.
        self.style = style
        self._tokens: list[str] | None = None  # id -> token, read once (`to_tokens`: thousands of calls a batch)
        for tok in (UNK, *DEFAULT_RESERVED):
            if tokenizer.token_to_id(tok) is None:
                raise ValueError(f"BPE tokenizer lacks the special token {tok}")

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int = 8000, min_freq: int = 2, lang: str | None = None
    ) -> SubwordVocab:
        """Learn merges from raw `texts` (pass the training split only, source and target together)."""
        tok = Tokenizer(models.BPE(unk_token=UNK))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_freq, show_progress=False, special_tokens=[UNK, *DEFAULT_RESERVED]
        )
        tok.train_from_iterator((preprocess(t) for t in texts), trainer=trainer)
        return cls(tok, lang=lang)

    def _special_index(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def with_lang(self, lang: str | None) -> SubwordVocab:
        """The same vocabulary, decoding with another language's spacing rules (shared src/tgt)."""
        return SubwordVocab(self.tokenizer, lang=lang, style=self.style)

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, SubwordVocab)
            and self.style == other.style
            and self.tokenizer.to_str() == other.tokenizer.to_str()
        )

    def __repr__(self) -> str:
        return f"SubwordVocab(size={len(self)}, lang={self.lang!r})"

    def __getitem__(self, tokens):
        return self.to_indices(tokens)

    def to_indices(self, tokens):
        unk = self.unk
        if isinstance(tokens, str):
            idx = self.tokenizer.token_to_id(tokens)
            return unk if idx is None else idx
        return [self.to_indices(t) for t in tokens]

    def to_tokens(self, indices):
        if self._tokens is None:
            self._tokens = [self.tokenizer.id_to_token(i) for i in range(len(self))]
        if isinstance(indices, int) or (hasattr(indices, "ndim") and indices.ndim == 0):
            return self._tokens[int(indices)]
        return [self._tokens[i] for i in _as_list(indices)]

    def _prep(self, text: str) -> str:
        return preprocess(text) if self.style == "book" else text

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(self._prep(text)).ids

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        # encode_batch runs in parallel in Rust: the reason to batch at all.
        texts = [self._prep(t) for t in texts]
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets we never use.
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [e.ids for e in encode(texts)]

    def decode(self, ids) -> str:
        text = self.tokenizer.decode(self._strip_specials(ids), skip_special_tokens=False)
        return detokenize(text, lang=self.lang) if self.style == "book" else text

    def reference_text(self, text: str) -> str:
        """A corpus sentence in the form `decode` produces, so BLEU compares like with like."""
        if self.style == "book":
            return detokenize(tokenize(text), lang=self.lang)
        normalizer = self.tokenizer.normalizer
        return (normalizer.normalize_str(text) if normalizer is not None else text).strip()

    def save(self, path: str | os.PathLike) -> None:
        """The tokenizer's JSON, plus an `attnlab` key recording the decoding language."""
        obj = json.loads(self.tokenizer.to_str())
        obj["attnlab"] = {"kind": self.kind, "lang": self.lang, "style": self.style}
        atomic_write_text(path, json.dumps(obj, ensure_ascii=False))

    @classmethod
    def from_dict(cls, obj: dict, source: str = "<dict>") -> SubwordVocab:
        obj = dict(obj)
        meta = obj.pop("attnlab", {})
        if "model" not in obj:
            raise ValueError(f"{source}: not a Hugging Face tokenizer JSON (no 'model' key)")
        if not isinstance(meta, dict):
            raise ValueError(
                f"{source}: its 'attnlab' entry must be an object, got {type(meta).__name__}; "
                f"re-save the vocabulary with SubwordVocab.save"
            )
        try:
            tokenizer = Tokenizer.from_str(json.dumps(obj))
        except Exception as exc:  # noqa: BLE001 -- the Rust parser raises a bare Exception for any malformed field
            raise ValueError(
                f"{source}: not a valid Hugging Face tokenizer JSON ({str(exc)[:120]}); "
                f"re-save the vocabulary or train the run again"
            ) from None
        return cls(tokenizer, lang=meta.get("lang"), style=meta.get("style", "book"))

    @classmethod
    def load(cls, path: str | os.PathLike) -> SubwordVocab:
        return cls.from_dict(read_json_object(path), source=str(path))


def load_vocab(path: str | os.PathLike):
    """Load either kind of vocabulary from its JSON, telling them apart by content."""
    obj = read_json_object(path)
    if obj.get("format") == _FORMAT:
        return Vocab.from_dict(obj, source=str(path))
    if obj.get("format") == SPM_FORMAT:
        return SentencePieceVocab.from_dict(obj, source=str(path))
    if "model" in obj:
        return SubwordVocab.from_dict(obj, source=str(path))
    raise ValueError(
        f"{path}: neither an attnlab Vocab JSON nor a tokenizers JSON; "
        "expected a file written by Vocab.save or SubwordVocab.save"
    )
