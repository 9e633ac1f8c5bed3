"""Translate one sentence and return every attention map the model used for it (for `attnlab
attention`, the demo's figures and the explorer).

    exp = explain(translator, "i'm home .", translator.options(beam=1))
    exp.maps["cross"].shape        # (N, H, Lt, Ls): layers, heads, produced tokens, source tokens

Decoding (`Translator.search`, any `DecodeOptions`; with `trace`, beam search's own record) finds the
output; then one teacher-forced forward `model(src, [<bos>] + output)` runs under `record_attention`.
Because the decoder is causal, the weights of query t in that forward are exactly those of decoding step t
(tests check it against the per-step weights recorded from cached decoding), so one pass yields the maps of
the whole decode.

The kinds of map come from the model itself (`model.attention_kinds()`: the Transformer declares
encoder_self, decoder_self and cross; the Bahdanau model only cross), not from module names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from attnlab.attention import mask_heads, record_attention
from attnlab.attention.recording import ATTENTION_KINDS, attention_maps
from attnlab.decoding.align import align_batch, source_word_index, target_word_index
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.targets import holds_phrases
from attnlab.decoding.trace import trace_path
from attnlab.decoding.translator import InputError, TextTooLong, encode_source
from attnlab.models.config import TransformerConfig
from attnlab.models.decoder_only import DecoderOnlyConfig

MAX_CHARS = 500  # longest request text, in characters, before tokenization


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
    heads_off: kind -> [[layer, head], ...] masked while decoding and recording (empty: none).
    beam_trace: with beam > 1 and trace=True, the search itself (`DecodeOptions.trace`'s record,
        tokens as strings, and "path": the (step, candidate) of each token of the winner); else None.
    subwords: the tokens are SentencePiece pieces ("▁" starts a word); `merge_subwords` joins them.
    positions, num_heads, num_kv_heads: how the model's attention knows word order and how many query and
        key/value heads each attention has (`attention_layout`); None for a model without them.
    nbest: the hypotheses found, best first (the first is the one whose maps these are): {"text", "score"
        (None where not finite), "finished", "constraints_met" (with constraints: it holds every phrase;
        else None)}.
    alignment: with options.align, the best hypothesis's word alignment: {"pairs": [[source word, target
        word], ...], "source_words", "target_words" (whitespace words), "source_token_words",
        "target_token_words" (the word of each source token, <eos> aside, and of each output token)}.
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
    heads_off: dict[str, list[list[int]]] = field(default_factory=dict)
    beam_trace: dict | None = None
    subwords: bool = False
    merged: bool = False
    positions: str | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    nbest: list[dict] = field(default_factory=list)
    alignment: dict | None = None

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
            "text": self.text,
            "translation": self.translation,
            "src_tokens": self.src_tokens,
            "tgt_tokens": self.tgt_tokens,
            "tgt_input_tokens": self.tgt_input_tokens,
            "beam": self.beam,
            "finished": self.finished,
            "model_type": self.model_type,
            "heads_off": self.heads_off,
            "beam_trace": self.beam_trace,
            "subwords": self.subwords,
            "merged": self.merged,
            "nbest": self.nbest,
            "alignment": self.alignment,
            "attention": {
                kind: _rounded(self.maps[kind], decimals) if kind in self.maps else [] for kind in ATTENTION_KINDS
            },
        }


def _rounded(w: Tensor, decimals: int) -> list:
    # float64 before rounding: a rounded float32 printed as a double would carry ~8 junk digits.
    scale = 10.0**decimals
    return (w.double() * scale).round().div(scale).tolist()


def attention_layout(model) -> tuple[str | None, int | None, int | None]:
    """(position scheme, query heads, key/value heads) of a translator's attention, as configured (before
    any head pruning): the Transformer's `positions`, `num_heads` and `kv_heads`; the decoder-only model's
    sinusoids with one key/value head per head; (None, None, None) for a model without heads or a
    position scheme (the Bahdanau RNN reads order from its recurrence)."""
    cfg = getattr(model, "config", None)
    if isinstance(cfg, TransformerConfig):
        return cfg.positions, cfg.num_heads, cfg.kv_heads
    if isinstance(cfg, DecoderOnlyConfig):
        return "sinusoidal", cfg.num_heads, cfg.num_heads
    return None, None, None


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


def head_kinds(model) -> dict[str, list]:
    """The kinds a head mask may name -> their modules, in layer order: the model's own attention kinds,
    and for a model whose maps are cut into views (`attention_views`: the decoder-only translator's one
    self-attention shown as encoder_self, decoder_self and cross) every view, naming the attention it is
    cut from, so switching a head off in one view switches it off in all three."""
    kinds = model.attention_kinds()
    if getattr(model, "attention_views", None) is not None and len(kinds) == 1:
        (modules,) = kinds.values()
        return {kind: modules for kind in ATTENTION_KINDS}
    return kinds


def head_masks_for(model, heads_off: Mapping[str, Sequence] | None) -> dict[str, Tensor]:
    """{kind: [[layer, head], ...]} -> {module name: (H,) 0/1 mask} for `attnlab.attention.mask_heads`.

    Kinds are `head_kinds(model)` (the model's own: encoder_self, decoder_self, cross); layers and
    heads count from 0. Raises InputError (a ValueError) naming the bad kind, pair, layer or head.
    """
    if not heads_off:
        return {}
    if not isinstance(heads_off, Mapping):
        raise InputError(f"heads_off must map an attention kind to [[layer, head], ...], got {heads_off!r}")
    kinds = head_kinds(model)
    names = {id(m): name for name, m in model.named_modules()}
    masks: dict[str, Tensor] = {}
    for kind, pairs in heads_off.items():
        if not pairs:  # an empty list asks for nothing, even of a kind the model lacks
            continue
        if kind not in kinds:
            raise InputError(f"heads_off: unknown attention kind {kind!r}; this model has {sorted(kinds)}")
        modules = kinds[kind]
        if isinstance(pairs, str) or not isinstance(pairs, Sequence):
            raise InputError(f"heads_off.{kind} must be a list of [layer, head] pairs, got {pairs!r}")
        for pair in pairs:
            if (
                not isinstance(pair, Sequence)
                or isinstance(pair, str)
                or len(pair) != 2
                or any(isinstance(x, bool) or not isinstance(x, int) for x in pair)
            ):
                raise InputError(f"heads_off.{kind}: each entry must be [layer, head] (two integers), got {pair!r}")
            layer, head = pair
            if not 0 <= layer < len(modules):
                raise InputError(
                    f"heads_off.{kind}: layer {layer} out of range; this model has layers 0..{len(modules) - 1}"
                )
            m = modules[layer]
            H = getattr(m, "num_heads", None)
            if H is None:
                raise InputError(
                    f"heads_off.{kind}: this model's {kind} attention has no heads to switch off "
                    f"({type(m).__name__}); head masks need a Transformer"
                )
            if not 0 <= head < H:
                raise InputError(f"heads_off.{kind}: head {head} out of range; layer {layer} has heads 0..{H - 1}")
            mask = masks.setdefault(names[id(m)], torch.ones(H))
            mask[head] = 0.0
    return masks


def _canonical_heads_off(heads_off: Mapping[str, Sequence] | None) -> dict[str, list[list[int]]]:
    return {k: [list(p) for p in sorted({(int(a), int(b)) for a, b in v})] for k, v in (heads_off or {}).items() if v}


def _search(translator, text: str, ids: list[int], options: DecodeOptions) -> tuple:
    """The hypotheses `Translator.translate_tokens` finds for `text` with `options` (the same call, so the
    same results), each as an nbest entry, and the best one's alignment (options.align) or None."""
    heads = translator.alignment_heads(options.align_layer, options.align_heads) if options.align else None
    (phrases,) = translator.encode_targets([ids], options)[1]
    (hyps,) = translator.search([ids], options)
    vocab = translator.tgt_vocab
    nbest = [_entry(vocab, h, phrases) for h in hyps]
    alignment = None
    if heads is not None:
        # All n-best outputs in one batch, as translate_tokens aligns them (same padding, same numbers).
        pairs = align_batch(translator, [text] * len(hyps), [ids] * len(hyps), [h.tokens for h in hyps], *heads)
        best = hyps[0].tokens
        alignment = {
            "pairs": [list(p) for p in pairs[0]],
            "source_words": text.split(),
            "target_words": vocab.decode(best).split(),
            "source_token_words": source_word_index(translator.src_vocab, text, ids),
            "target_token_words": target_word_index(vocab, best),
        }
    return hyps[0], nbest, alignment


def _readable_trace(trace: list, vocab) -> dict:
    """One sentence's beam search trace (`Hypothesis.trace`) with token strings and the winner's path."""
    steps = [r for r in trace if "step" in r]
    for r in steps:
        for c in r["candidates"]:
            c["text"] = vocab.to_tokens([c["token"]])[0]
    winner = next((r["winner"] for r in trace if "winner" in r), None)
    sentence = trace[0]["sentence"] if trace else 0
    return {"steps": steps, "winner": winner, "path": [list(p) for p in trace_path(trace, sentence)]}


def explain(
    translator,
    text: str,
    options: DecodeOptions | None = None,
    *,
    max_chars: int = MAX_CHARS,
    truncate: bool = False,
    heads_off: Mapping[str, Sequence] | None = None,
    trace: bool = False,
) -> Explanation:
    """Translate `text` as `Translator.translate_tokens(options=...)` does (None: the translator's defaults, one
    answer) and record every attention map of its best hypothesis; `nbest` and `alignment` hold the rest. A
    prefix or constraint the target vocabulary cannot hold, or alignment heads the model lacks, raise ValueError.

    heads_off: {kind: [[layer, head], ...]} heads masked (output gated to 0 before W_o) while decoding
        and recording, in this thread only (`mask_heads`); see `head_masks_for`.
    trace: with beam > 1, also return the beam search step by step (`Explanation.beam_trace`), where the options
        decode as plain beam search (no n-best, prefix, constraints or controls: `DecodeOptions.plain`).

    Raises InputError (a ValueError) for text that is empty, too long or untokenizable and for a bad head mask.
    """
    options = translator.options(n_best=1) if options is None else options
    ids = check_text(translator, text, max_chars, truncate)
    src_vocab, tgt_vocab, model = translator.src_vocab, translator.tgt_vocab, translator.model
    masks = head_masks_for(model, heads_off)
    traced = trace and options.beam > 1 and options.plain
    with torch.inference_mode(), mask_heads(model, masks):
        hyp, nbest, alignment = _search(translator, text, ids, replace(options, trace=traced))
        out = hyp.tokens
        # A decode cut at the length limit has no query that produced <eos>: its last token is
        # not fed back, so the forward takes one input fewer and no <eos> row is shown.
        dec_in = [tgt_vocab.bos] + (out if hyp.finished else out[:-1])
        maps = _recorded_maps(translator, ids, dec_in)
    model_type = getattr(model, "MODEL_TYPE", None) or translator.config.get("model_type", type(model).__name__.lower())
    positions, num_heads, num_kv_heads = attention_layout(model)
    return Explanation(
        text=text,
        translation=tgt_vocab.decode(out),
        src_tokens=src_vocab.to_tokens(ids) + ["<eos>"],
        tgt_tokens=tgt_vocab.to_tokens(out) + (["<eos>"] if hyp.finished else []),
        tgt_input_tokens=tgt_vocab.to_tokens(dec_in),
        beam=options.beam,
        finished=hyp.finished,
        model_type=model_type,
        maps=maps,
        heads_off=_canonical_heads_off(heads_off),
        beam_trace=_readable_trace(hyp.trace or [], tgt_vocab) if traced else None,
        subwords=getattr(tgt_vocab, "kind", None) == "spm" or getattr(src_vocab, "kind", None) == "spm",
        positions=positions,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        nbest=nbest,
        alignment=alignment,
    )


def _recorded_maps(translator, ids: list[int], dec_in: list[int]) -> dict[str, torch.Tensor]:
    """Every attention map of one teacher-forced forward over the source `ids` (+ <eos>) and the decoder
    inputs `dec_in`, grouped by kind (`group_maps`), on the CPU; the model in eval mode meanwhile."""
    model, device = translator.model, translator.device
    src = torch.tensor([ids + [translator.src_vocab.eos]], dtype=torch.long, device=device)  # (1, Ls)
    tgt = torch.tensor([dec_in], dtype=torch.long, device=device)  # (1, Lt)
    lens = torch.tensor([src.shape[1]], device=device)
    was_training = model.training
    model.eval()
    try:
        with record_attention(model) as rec:
            model(src, tgt, lens)
    finally:
        model.train(was_training)
    maps = group_maps(model, rec)
    views = getattr(model, "attention_views", None)  # one self-attention cut into kinds (decoder-only)
    return {k: v.cpu() for k, v in (views(maps, src.shape[1]) if views else maps).items()}


def _entry(vocab, h: Hypothesis, phrases: list[list[int]]) -> dict:
    """An nbest entry; constraints_met as the search counts them (`holds_phrases`: a phrase given twice, twice)."""
    score = h.score if math.isfinite(h.score) else None
    met = holds_phrases(h.tokens, phrases) if phrases else None
    return {"text": vocab.decode(h.tokens), "score": score, "finished": h.finished, "constraints_met": met}


__all__ = [
    "MAX_CHARS",
    "Explanation",
    "InputError",
    "TextTooLong",
    "attention_layout",
    "check_text",
    "explain",
    "group_maps",
    "head_kinds",
    "head_masks_for",
]
