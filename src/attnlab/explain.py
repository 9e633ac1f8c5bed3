"""Translate one sentence and return every attention map the model used for it (for `attnlab
attention`, the demo's figures and the explorer).

    exp = explain(translator, "i'm home .", beam=1)
    exp.cross.shape        # (N, H, Lt, Ls): layers, heads, produced tokens, source tokens

Decoding (greedy or beam search, with the key/value cache) finds the output; then one teacher-forced
forward `model(src, [<bos>] + output)` runs under `record_attention`. Because the decoder is causal, the
weights of query t in that forward are exactly those of decoding step t (tests check it against the
per-step weights recorded from cached decoding), so one pass yields the maps of the whole decode.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.attention import record_attention
from attnlab.decode import attention_maps

MAX_CHARS = 500  # longest request text, in characters, before tokenization


class InputError(ValueError):
    """The text cannot be translated as given (empty, too many tokens...); the message says why."""


class TextTooLong(InputError):
    """The text exceeds the character limit (HTTP 413 in the explorer)."""


@dataclass
class Explanation:
    """One translation with its attention maps.

    src_tokens: the source as the model saw it (unknown words as <unk>, then <eos>); length Ls.
    tgt_tokens: the token each decoder position produced (the output, + <eos> if decoding finished); Lt.
    tgt_input_tokens: the decoder's inputs (<bos> + output, shifted): the keys of decoder self-attention; Lt.
    encoder_self (N, H, Ls, Ls), decoder_self (N, H, Lt, Lt), cross (N, H, Lt, Ls): float32 weights;
    N layers, H heads. A model without encoder/decoder self-attention (Bahdanau) has N = 0 there.
    """

    text: str
    translation: str
    src_tokens: list[str]
    tgt_tokens: list[str]
    tgt_input_tokens: list[str]
    beam: int
    finished: bool
    encoder_self: Tensor
    decoder_self: Tensor
    cross: Tensor

    def to_dict(self, decimals: int = 4) -> dict:
        """JSON-ready dict; weights as nested lists rounded to `decimals` to keep payloads small."""
        return {
            "text": self.text, "translation": self.translation, "src_tokens": self.src_tokens,
            "tgt_tokens": self.tgt_tokens, "tgt_input_tokens": self.tgt_input_tokens, "beam": self.beam,
            "finished": self.finished,
            "attention": {name: _rounded(getattr(self, name), decimals)
                          for name in ("encoder_self", "decoder_self", "cross")},
        }


def _rounded(w: Tensor, decimals: int) -> list:
    # float64 before rounding: a rounded float32 printed as a double would carry ~8 junk digits.
    scale = 10.0 ** decimals
    return (w.double() * scale).round().div(scale).tolist()


def check_text(translator, text: str, max_chars: int = MAX_CHARS, truncate: bool = False) -> list[int]:
    """Source ids (no <eos>) of `text`, or InputError saying what is wrong with it.

    truncate: cut a sentence longer than the model's max_len (with a warning) instead of refusing it.
    """
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError("text is empty; type an English sentence such as \"i'm home .\"")
    if len(text) > max_chars:
        raise TextTooLong(f"text has {len(text)} characters; the explorer accepts at most {max_chars}")
    ids = translator.src_vocab.encode(text)
    if not ids:
        raise InputError(f"{text[:60]!r} has no tokens after preprocessing; type some English words")
    if translator.max_len is not None and len(ids) + 1 > translator.max_len:
        if truncate:
            warnings.warn(f"truncating a {len(ids)}-token sentence to the model's max_len {translator.max_len}",
                          stacklevel=3)
            return ids[: translator.max_len - 1]
        raise InputError(f"the sentence has {len(ids)} tokens (+1 <eos>) but this model takes at most "
                         f"{translator.max_len} (its max_len); shorten it")
    return ids


def _layer_key(name: str) -> list:
    """Natural sort: decoder.blocks.10 after decoder.blocks.9."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _group(rec) -> dict[str, Tensor]:
    """Recorded (1, H, Lq, Lk) weights per module -> (N, H, Lq, Lk) per kind, layers in order."""
    kinds: dict[str, list[tuple[str, Tensor]]] = {"encoder_self": [], "decoder_self": [], "cross": []}
    # An RNN decoder (Bahdanau) calls its attention once per target step even when teacher-forced:
    # attention_maps stitches those calls along the query axis (one call stays as it is).
    for name, w in attention_maps(rec).items():
        if name.startswith("encoder."):
            kind = "encoder_self"
        elif name.startswith("decoder.") and name.endswith("self_attention"):
            kind = "decoder_self"
        else:  # cross-attention, or the one additive attention of a Bahdanau decoder
            kind = "cross"
        kinds[kind].append((name, w[0].float()))
    return {kind: torch.stack([w for _, w in sorted(ws, key=lambda x: _layer_key(x[0]))]) if ws
            else torch.empty(0) for kind, ws in kinds.items()}


def explain(translator, text: str, beam: int = 1, max_chars: int = MAX_CHARS,
            truncate: bool = False) -> Explanation:
    """Translate `text` (greedy for beam=1, else beam search) and record every attention map.

    Raises InputError (a ValueError) for text that is empty, too long or untokenizable, and for a
    beam below 1 (the HTTP API caps it at 8).
    """
    if not isinstance(beam, int) or beam < 1:
        raise InputError(f"beam must be a positive integer, got {beam!r}")
    ids = check_text(translator, text, max_chars, truncate)
    src_vocab, tgt_vocab, model, device = translator.src_vocab, translator.tgt_vocab, translator.model, translator.device
    with torch.inference_mode():
        (out,) = translator.decode_ids([ids], beam=beam)
        # A decode that hit the output limit stopped without <eos>: its last token has no query that
        # produced <eos>, so the forward takes one input fewer and no <eos> row is shown.
        finished = len(out) < translator.output_limit(len(ids) + 1)
        dec_in = [tgt_vocab.bos] + (out if finished else out[:-1])
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
        maps = {k: v.cpu() for k, v in _group(rec).items()}
    tgt_tokens = tgt_vocab.to_tokens(out) + (["<eos>"] if finished else [])
    return Explanation(
        text=text, translation=tgt_vocab.decode(out), src_tokens=src_vocab.to_tokens(ids) + ["<eos>"],
        tgt_tokens=tgt_tokens, tgt_input_tokens=tgt_vocab.to_tokens(dec_in), beam=beam, finished=finished,
        **maps)


__all__ = ["Explanation", "InputError", "TextTooLong", "MAX_CHARS", "check_text", "explain"]
