"""Head analysis after Voita et al. 2019 and Michel et al. 2019: what each head attends to, how much
each matters, and what is left after removing the least important ones.

Every function returns plain data (dicts of lists of floats, keyed by the attention module's qualified
name, e.g. "encoder.blocks.0.attention"), ready for JSON, a table, a figure or the explorer.

    batches = validation_batches(examples, translator.src_vocab, translator.tgt_vocab)
    stats = head_statistics(model, batches, src_vocab, tgt_vocab)     # confidence, entropy, positions...
    words = word_confidence(model, batches, src_vocab, tgt_vocab)      # the alignment head's criterion
    grad = gradient_importance(model, batches)                         # Michel's |dL/d gate|
    curve = pruning_curve(translator, examples, batches, grad, kind="encoder self")
"""

from __future__ import annotations

import json
import math
import os
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from attnlab.analysis.alignment_head import choose_alignment, word_confidence
from attnlab.analysis.explanation import Explanation
from attnlab.attention import (
    ATTENTION_KINDS,
    attention_modules,
    head_masks_from_indices,
    mask_heads,
    record_attention,
)
from attnlab.data import iterate_batches
from attnlab.metrics import corpus_bleu, reference_text
from attnlab.runs.layout import CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE
from attnlab.runs.loading import load_translator
from attnlab.runs.outputs import claim_output, write_output
from attnlab.runs.weights import save_weights
from attnlab.training.loss import sequence_loss
from attnlab.utils.files import write_json

if TYPE_CHECKING:
    from attnlab.models import Transformer

# The kinds as this module names them in its results and flags: words ("encoder self"), not identifiers.
_LABELS = {kind: kind.replace("_", " ") for kind in ATTENTION_KINDS}
_PUNCT = set(string.punctuation) | set("«»…¿¡–—’“”")


# --------------------------------------------------------------------------- structure
def attention_kinds(model: nn.Module) -> dict[str, list[str]]:
    """{kind: [module names, layer order]} for "encoder self", "decoder self" and "cross".

    Raises ValueError for a model without multi-head attention (e.g. the Bahdanau seq2seq).
    """
    modules = attention_modules(model)
    if not modules:
        raise ValueError(
            f"head analysis needs a model with multi-head attention (a Transformer), got "
            f"{type(model).__name__}; train one with `attnlab train --model transformer`"
        )
    kinds: dict[str, list[str]] = {label: [] for label in _LABELS.values()}
    for name in modules:
        if name.endswith("cross_attention"):
            kinds["cross"].append(name)
        elif name.endswith("self_attention") or name.startswith("decoder"):
            kinds["decoder self"].append(name)
        else:
            kinds["encoder self"].append(name)
    return {k: v for k, v in kinds.items() if v}


def head_masks_check(model: nn.Module, heads: Mapping[str, Sequence[int]]) -> None:
    """Raise one clear ValueError for an unknown module name or head index in {module: [heads]}."""

    head_masks_from_indices(model, heads)


def num_heads(model: nn.Module) -> dict[str, int]:
    return {name: m.num_heads for name, m in attention_modules(model).items()}


def validation_batches(examples: Sequence, src_vocab, tgt_vocab, batch_size: int = 64) -> list:
    """Unshuffled padded batches of `examples` (a data split) for teacher-forced analysis."""

    if not examples:
        raise ValueError("head analysis needs at least one validation sentence, got an empty split")
    return list(iterate_batches(examples, src_vocab, tgt_vocab, batch_size=batch_size, shuffle=False))


def choose_split(data, asked: str | None, default: str = "valid") -> tuple[str, Sequence, str | None]:
    """(split name, its examples, a note for the user or None): the `asked` split, or with none asked
    the `default` one, or when that is empty (the book's d2l setting holds nothing out) the run's
    largest non-empty split, with a note saying so. An empty split asked for by name is a ValueError."""
    name = asked or default
    examples = getattr(data, name)
    if len(examples):
        return name, examples, None
    sizes = {s: len(getattr(data, s)) for s in ("train", "valid", "test") if s != name}
    sizes = {s: n for s, n in sizes.items() if n}
    if not sizes:
        raise ValueError("every split of this run is empty; pass the corpus it was trained on with --data")
    largest = max(sizes, key=lambda s: sizes[s])
    if asked is not None:
        others = ", ".join(f"--split {s} ({n} sentences)" for s, n in sizes.items())
        raise ValueError(f"the {name} split of this run is empty (its data settings hold none out); pass {others}")
    note = (
        f"the run has no {name} split (its data settings hold none out); analysing its {largest} split "
        f"({sizes[largest]} sentences) instead — pass --split to choose"
    )
    return largest, getattr(data, largest), note


def check_precision(precision: str) -> None:
    """Head importance is a gradient: int8 quantized layers have none, so int8 is refused in one line."""
    if precision == "int8":
        raise ValueError(
            "head analysis measures importance by gradients, which int8 quantized layers do not have; "
            "pass --precision fp32 (or bf16, or auto)"
        )


def _loss(model: nn.Module, batch) -> tuple[Tensor, Tensor]:
    logits = model(batch.src, batch.tgt_in, batch.src_valid_lens)
    return sequence_loss(logits, batch.tgt_out, batch.tgt_valid_lens)


# --------------------------------------------------------------------------- behaviour (Voita)
def _special_ids(vocab) -> tuple[Tensor, Tensor, Tensor]:
    """(eos id, bos id (each a 0-d tensor), ids of punctuation-only tokens)."""
    tokens = vocab.to_tokens(list(range(len(vocab))))
    punct = [
        i
        for i, t in enumerate(tokens)
        if t and not t.startswith("<") and all(c in _PUNCT for c in t.lstrip("▁")) and t.lstrip("▁")
    ]
    try:
        bos = vocab.bos
    except ValueError:  # a vocabulary without <bos> (imported Marian): no key is one
        bos = -1
    return torch.tensor(vocab.eos), torch.tensor(bos), torch.tensor(punct, dtype=torch.long)


@torch.no_grad()
def head_statistics(model: nn.Module, batches: Sequence, src_vocab, tgt_vocab) -> dict[str, dict[str, list[float]]]:
    """Per head, averaged over every real (non-padding) query of the batches (teacher forcing):

    - confidence: mean of the largest weight (Voita et al.'s "confidence");
    - entropy: mean entropy of the weights, in nats;
    - same / previous / next: mean weight on key position i, i - 1, i + 1 for query i;
    - eos / punctuation: mean weight on keys that are `<eos>` / punctuation-only tokens;
    - bos / first: attention sinks (Xiao et al. 2023): mean weight on `<bos>` keys (the decoder's first
      input) and on key position 0 (the first source token, or `<bos>` in decoder self-attention).

    Returns {module name: {statistic: [value per head]}}.
    """
    model.eval()
    kinds = attention_kinds(model)
    src_ids, tgt_ids = _special_ids(src_vocab), _special_ids(tgt_vocab)
    sums: dict[str, dict[str, Tensor]] = {}
    counts: dict[str, float] = {}
    for batch in batches:
        with record_attention(model) as rec:
            model(batch.src, batch.tgt_in, batch.src_valid_lens)
        for kind, names in kinds.items():
            on_source = kind != "decoder self"
            keys = batch.src if on_source else batch.tgt_in  # (B, Lk) key tokens
            eos, bos, punct = src_ids if on_source else tgt_ids
            q_lens = batch.src_valid_lens if kind == "encoder self" else batch.tgt_valid_lens
            for name in names:
                W = rec.weights[name][0].double()  # (B, H, Lq, Lk)
                B, H, Lq, Lk = W.shape
                real = (torch.arange(Lq)[None, :] < q_lens[:, None]).double()  # (B, Lq)
                per_query = {
                    "confidence": W.max(dim=-1).values,
                    "entropy": -(W * torch.log(W.clamp_min(1e-30))).sum(-1),
                    "same": _diagonal(W, 0),
                    "previous": _diagonal(W, -1),
                    "next": _diagonal(W, 1),
                    "eos": (W * (keys == eos)[:, None, None, :]).sum(-1),
                    "punctuation": (W * torch.isin(keys, punct)[:, None, None, :]).sum(-1),
                    "bos": (W * (keys == bos)[:, None, None, :]).sum(-1),
                    "first": W[..., 0],
                }  # each (B, H, Lq)
                acc = sums.setdefault(name, {k: torch.zeros(H, dtype=torch.float64) for k in per_query})
                for k, v in per_query.items():
                    acc[k] += (v * real[:, None, :]).sum(dim=(0, 2))
                counts[name] = counts.get(name, 0.0) + float(real.sum())
    return {name: {k: (v / max(counts[name], 1.0)).tolist() for k, v in acc.items()} for name, acc in sums.items()}


def _diagonal(W: Tensor, offset: int) -> Tensor:
    """W[..., i, i + offset] for every query i (0 where that key does not exist). (B, H, Lq)."""
    Lq, Lk = W.shape[-2:]
    j = torch.arange(Lq) + offset
    ok = (j >= 0) & (j < Lk)
    picked = W.gather(-1, j.clamp(0, Lk - 1).expand(*W.shape[:-2], Lq)[..., None])[..., 0]
    return picked * ok


# --------------------------------------------------------------------------- importance (Michel)
def gradient_importance(model: nn.Module, batches: Sequence) -> dict[str, list[float]]:
    """Michel et al.'s proxy: E_batches |d loss / d gate_h| with every gate at 1 (no head masked).

    The loss is the mean cross-entropy per real target token of each batch. Returns {module: [per head]}.
    """
    model.eval()
    gates = {name: torch.ones(h, dtype=_dtype(model), requires_grad=True) for name, h in num_heads(model).items()}
    total = {name: torch.zeros(len(g), dtype=torch.float64) for name, g in gates.items()}
    for batch in batches:
        with mask_heads(model, gates):
            loss_sum, count = _loss(model, batch)
            loss = loss_sum / count.clamp(min=1)
        grads = torch.autograd.grad(loss, list(gates.values()))
        for name, g in zip(gates, grads):
            total[name] += g.detach().abs().double()
    return {name: (t / max(len(batches), 1)).tolist() for name, t in total.items()}


def _dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def _masks(model: nn.Module, off: Mapping[str, Sequence[int]]) -> dict[str, Tensor]:
    heads = num_heads(model)
    out = {}
    for name, idx in off.items():
        m = torch.ones(heads[name], dtype=_dtype(model))
        m[list(idx)] = 0
        out[name] = m
    return out


@torch.no_grad()
def evaluate_with_masks(
    translator,
    examples: Sequence,
    batches: Sequence,
    off: Mapping[str, Sequence[int]] | None = None,
    bleu: bool = True,
    beam: int = 1,
) -> dict[str, float | None]:
    """Validation loss per token (teacher forcing) and corpus BLEU (greedy or beam decoding) with the
    heads in `off` ({module: head indices}) masked. Returns {"loss": ..., "bleu": ... or None}."""

    model = translator.model
    model.eval()
    with mask_heads(model, _masks(model, off or {})):
        total, count = 0.0, 0
        for batch in batches:
            s, n = _loss(model, batch)
            total, count = total + float(s), count + int(n)
        score = None
        if bleu:
            found = translator.search([ex.src_ids for ex in examples], translator.options(beam=beam, scores=False))
            hyps = [translator.tgt_vocab.decode(hs[0].tokens) for hs in found]
            refs = [_reference_text(ex.tgt_text, translator.tgt_vocab) for ex in examples]
            score = corpus_bleu(hyps, refs)
    return {"loss": total / max(count, 1), "bleu": score}


def _reference_text(text: str, vocab) -> str:
    return reference_text(text, vocab)


def masked_head_scores(
    translator, examples: Sequence, batches: Sequence, bleu: bool = True, beam: int = 1
) -> dict[str, list[dict[str, float | None]]]:
    """The validation loss/BLEU with each head alone masked: {module: [{"loss", "bleu"} per head]}."""
    return {
        name: [evaluate_with_masks(translator, examples, batches, {name: [h]}, bleu, beam) for h in range(H)]
        for name, H in num_heads(translator.model).items()
    }


def pruning_curve(
    translator,
    examples: Sequence,
    batches: Sequence,
    importance: Mapping[str, Sequence[float]],
    kind: str,
    *,
    bleu: bool = True,
    beam: int = 1,
) -> list[dict]:
    """Greedy pruning of one attention kind: mask its heads one by one, least important first, and
    measure after each removal. Heads of the other kinds stay on.

    Returns [{"removed": n, "head": [module, index] or None, "loss": ..., "bleu": ...}], starting at n = 0.
    """
    kinds = attention_kinds(translator.model)
    if kind not in kinds:
        raise ValueError(f"unknown attention kind {kind!r}; this model has {sorted(kinds)}")
    order = sorted(
        ((importance[name][h], name, h) for name in kinds[kind] for h in range(len(importance[name]))),
        key=lambda t: (t[0], t[1], t[2]),
    )
    off: dict[str, list[int]] = {}
    curve: list[dict[str, Any]] = [
        {"removed": 0, "head": None, **evaluate_with_masks(translator, examples, batches, off, bleu, beam)}
    ]
    for n, (_, name, h) in enumerate(order, start=1):
        off.setdefault(name, []).append(h)
        curve.append(
            {"removed": n, "head": [name, h], **evaluate_with_masks(translator, examples, batches, off, bleu, beam)}
        )
    return curve


def analyze_heads(
    translator, examples: Sequence, batch_size: int = 64, bleu: bool = True, beam: int = 1, curve: bool = True
) -> dict:
    """Everything above for one model and one data split, as one JSON-ready dict."""
    check_precision(getattr(getattr(translator, "precision", None), "picked", "fp32"))
    model = translator.model
    batches = validation_batches(examples, translator.src_vocab, translator.tgt_vocab, batch_size)
    kinds = attention_kinds(model)
    grad = gradient_importance(model, batches)
    words = word_confidence(model, batches, translator.src_vocab, translator.tgt_vocab)  # cross-attention only
    report = {
        "sentences": len(examples),
        "beam": beam,
        "kinds": kinds,
        "num_heads": num_heads(model),
        "baseline": evaluate_with_masks(translator, examples, batches, {}, bleu, beam),
        "statistics": head_statistics(model, batches, translator.src_vocab, translator.tgt_vocab),
        "gradient_importance": grad,
        "word_confidence": words,
        "alignment": choose_alignment(model, words),
        "masked": masked_head_scores(translator, examples, batches, bleu, beam),
    }
    if curve:
        report["pruning_curves"] = {
            k: pruning_curve(translator, examples, batches, grad, k, bleu=bleu, beam=beam) for k in kinds
        }
    return report


# --------------------------------------------------------------------------- pruned runs
def save_pruned_run(run_dir: str | os.PathLike, heads: Mapping[str, Sequence[int]], out_dir: str | os.PathLike):
    """Load the run at `run_dir`, remove `heads` ({module: current head indices}) and write a complete
    run folder at `out_dir` (config with `pruned_heads`, vocabularies, weights) that `load_translator`
    opens like any other. Returns the pruned Translator."""

    claim = claim_output(out_dir, "run", sources=[run_dir])  # a new folder: a pruned copy never replaces a run
    translator = load_translator(run_dir)
    if not hasattr(translator.model, "prune_heads"):
        raise ValueError(f"{type(translator.model).__name__} cannot be pruned; only Transformers have heads to remove")
    model = cast("Transformer", translator.model)
    model.prune_heads({name: list(idx) for name, idx in heads.items()})
    cfg = dict(translator.config)
    cfg["model"] = model.config.to_dict()
    with write_output(claim, {"pruned_from": str(Path(run_dir).resolve())}) as tmp:
        translator.src_vocab.save(tmp / SRC_VOCAB_FILE)
        translator.tgt_vocab.save(tmp / TGT_VOCAB_FILE)
        save_weights(model, tmp / WEIGHTS_FILE)
        write_json(tmp / CONFIG_FILE, cfg)
    return translator


def importance_grid(values: Mapping[str, Sequence[float]], names: Sequence[str]) -> list[list[float]]:
    """Rows = layers (names in order), columns = heads; NaN where a layer has fewer heads (pruned)."""
    width = max((len(values[n]) for n in names), default=0)
    return [list(values[n]) + [math.nan] * (width - len(values[n])) for n in names]


# --------------------------------------------------------------------------- head importance
def head_confidence(exp: Explanation) -> dict[str, list[list[float]]]:
    """This translation's per-head confidence (Voita et al. 2019): the mean over queries of the largest
    weight, as `{kind: [layer][head]}`; a cheap stand-in for importance when no head analysis exists."""
    return {kind: W.max(dim=-1).values.mean(dim=-1).tolist() for kind, W in exp.maps.items() if W.dim() == 4}


def load_head_importance(path, model, key: str = "gradient_importance") -> dict[str, list[list[float]]]:
    """Per-head importance from `attnlab heads`' heads.json, as `{kind: [layer][head]}` with this model's
    kinds (encoder_self, decoder_self, cross). Raises ValueError if the file does not fit the model."""
    path = Path(path)
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        values = report[key]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a heads.json with {key!r} (written by `attnlab heads`): {exc}") from exc
    names = {id(m): name for name, m in model.named_modules()}
    out = {}
    for kind, modules in model.attention_kinds().items():
        rows = []
        for m in modules:
            name = names[id(m)]
            if name not in values or len(values[name]) != getattr(m, "num_heads", -1):
                raise ValueError(
                    f"{path} does not describe this model: no {getattr(m, 'num_heads', '?')} values "
                    f"for {name}; run `attnlab heads` on this checkpoint again"
                )
            rows.append([float(v) for v in values[name]])
        out[kind] = rows
    return out
