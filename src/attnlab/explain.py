"""Translate one sentence and return every attention map the model used for it (for `attnlab
attention`, the demo's figures and the explorer).

    exp = explain(translator, "i'm home .", beam=1)
    exp.maps["cross"].shape        # (N, H, Lt, Ls): layers, heads, produced tokens, source tokens

Decoding (greedy or beam search, with the key/value cache) finds the output; then one teacher-forced
forward `model(src, [<bos>] + output)` runs under `record_attention`. Because the decoder is causal, the
weights of query t in that forward are exactly those of decoding step t (tests check it against the
per-step weights recorded from cached decoding), so one pass yields the maps of the whole decode.

The kinds of map come from the model itself (`model.attention_kinds()`: the Transformer declares
encoder_self, decoder_self and cross; the Bahdanau model only cross), not from module names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnlab.attention import record_attention
from attnlab.decode import attention_maps
from attnlab.translator import InputError, TextTooLong, encode_source

MAX_CHARS = 500  # longest request text, in characters, before tokenization
KINDS = ("encoder_self", "decoder_self", "cross")  # every kind a model may declare, in display order


@dataclass
class Explanation:
    """One translation with its attention maps.

    src_tokens: the source as the model saw it (unknown words as <unk>, then <eos>); length Ls.
    tgt_tokens: the token each decoder position produced (the output, + <eos> if decoding finished); Lt.
    tgt_input_tokens: the decoder's inputs (<bos> + output, shifted): the keys of decoder self-attention; Lt.
    maps: kind -> float32 weights (N, H, Lq, Lk), N layers, H heads, for the kinds the model declares:
        encoder_self (N, H, Ls, Ls), decoder_self (N, H, Lt, Lt), cross (N, H, Lt, Ls).
    model_type: "transformer", "bahdanau", ...
    finished: decoding ended with <eos> (from the Hypothesis), not at the length limit.
    """

    text: str
    translation: str
    src_tokens: list[str]
    tgt_tokens: list[str]
    tgt_input_tokens: list[str]
    beam: int
    finished: bool
    model_type: str
    maps: dict[str, Tensor] = field(default_factory=dict)

    # The three kinds by name; a kind the model lacks is an empty tensor (N = 0 layers).
    @property
    def encoder_self(self) -> Tensor:
        return self.maps.get("encoder_self", torch.empty(0))

    @property
    def decoder_self(self) -> Tensor:
        return self.maps.get("decoder_self", torch.empty(0))

    @property
    def cross(self) -> Tensor:
        return self.maps.get("cross", torch.empty(0))

    def to_dict(self, decimals: int = 4) -> dict:
        """JSON-ready dict; weights as nested lists rounded to `decimals` to keep payloads small. Every
        kind is present (an empty list for one the model lacks), so the API's schema stays fixed."""
        return {
            "text": self.text, "translation": self.translation, "src_tokens": self.src_tokens,
            "tgt_tokens": self.tgt_tokens, "tgt_input_tokens": self.tgt_input_tokens, "beam": self.beam,
            "finished": self.finished, "model_type": self.model_type,
            "attention": {kind: _rounded(self.maps[kind], decimals) if kind in self.maps else []
                          for kind in KINDS},
        }


def _rounded(w: Tensor, decimals: int) -> list:
    # float64 before rounding: a rounded float32 printed as a double would carry ~8 junk digits.
    scale = 10.0 ** decimals
    return (w.double() * scale).round().div(scale).tolist()


def check_text(translator, text: str, max_chars: int = MAX_CHARS, truncate: bool = False) -> list[int]:
    """Source ids (no <eos>) of `text`, or InputError saying what is wrong with it (`encode_source`
    with the explorer's character limit)."""
    return encode_source(translator.src_vocab, text, translator.max_len, truncate, max_chars=max_chars)


def group_maps(model, rec) -> dict[str, Tensor]:
    """Recorded (1, H, Lq, Lk) weights -> kind -> (N, H, Lq, Lk), layers in the order the model declares."""
    names = {id(m): name for name, m in model.named_modules()}
    # An RNN decoder (Bahdanau) calls its attention once per target step even when teacher-forced:
    # attention_maps stitches those calls along the query axis (one call stays as it is).
    recorded = attention_maps(rec)
    out = {}
    for kind, modules in model.attention_kinds().items():
        out[kind] = torch.stack([recorded[names[id(m)]][0].float() for m in modules])
    return out


def explain(translator, text: str, beam: int = 1, max_chars: int = MAX_CHARS,
            truncate: bool = False) -> Explanation:
    """Translate `text` (greedy for beam=1, else beam search) and record every attention map.

    Raises InputError (a ValueError) for text that is empty, too long or untokenizable, and for a
    beam below 1 (the HTTP API caps it at 8).
    """
    if not isinstance(beam, int) or isinstance(beam, bool) or beam < 1:
        raise InputError(f"beam must be a positive integer, got {beam!r}")
    ids = check_text(translator, text, max_chars, truncate)
    src_vocab, tgt_vocab = translator.src_vocab, translator.tgt_vocab
    model, device = translator.model, translator.device
    with torch.inference_mode():
        (hyp,) = translator.decode([ids], beam=beam)
        out = hyp.tokens
        # A decode cut at the length limit has no query that produced <eos>: its last token is
        # not fed back, so the forward takes one input fewer and no <eos> row is shown.
        dec_in = [tgt_vocab.bos] + (out if hyp.finished else out[:-1])
        src = torch.tensor([ids + [src_vocab.eos]], dtype=torch.long, device=device)      # (1, Ls)
        tgt = torch.tensor([dec_in], dtype=torch.long, device=device)                     # (1, Lt)
        lens = torch.tensor([src.shape[1]], device=device)
        was_training = model.training
        model.eval()
        try:
            with record_attention(model) as rec:
                model(src, tgt, lens)
        finally:
            model.train(was_training)
        maps = {k: v.cpu() for k, v in group_maps(model, rec).items()}
    model_type = getattr(model, "MODEL_TYPE", None) or translator.config.get("model_type", type(model).__name__.lower())
    return Explanation(
        text=text, translation=tgt_vocab.decode(out), src_tokens=src_vocab.to_tokens(ids) + ["<eos>"],
        tgt_tokens=tgt_vocab.to_tokens(out) + (["<eos>"] if hyp.finished else []),
        tgt_input_tokens=tgt_vocab.to_tokens(dec_in), beam=beam, finished=hyp.finished, model_type=model_type,
        maps=maps)


__all__ = ["KINDS", "MAX_CHARS", "Explanation", "InputError", "TextTooLong", "check_text", "explain", "group_maps"]
