"""Word alignments from cross-attention, as Pharaoh pairs `i-j` (source word i, target word j, 0-based).

    pairs = align_batch(translator, texts, src_ids, outputs, layer=None, heads=None)  # one list per output

Words are the whitespace-separated words of the source as given and of the printed translation. The
attention is that of one decoder layer's cross-attention, averaged over the chosen heads, read from one
teacher-forced forward `model(src, [<bos>] + output)` (the decoder is causal, so query t there is
exactly decoding step t, whatever search found the output). Tokens are merged into words as
`attnlab.analysis.subwords` merges maps: keys summed over a word's tokens, queries averaged; each
target word is then linked to the source word it attends to most (<eos> and padding left out).

Default: the run's choice when `attnlab heads` saved one (RUN/alignment.json, read by `load_translator` as
a `SavedAlignment`: the cross-attention head with the highest word confidence); otherwise the last but one
layer (the penultimate layer's attention aligns best in Garg et al. 2019's measurements; a one-layer model
uses its only layer), averaged over all its heads. A layer or heads given explicitly replace either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.attention import record_attention
from attnlab.attention.recording import attention_maps
from attnlab.decoding.protocol import inference

__all__ = [
    "SavedAlignment",
    "align_batch",
    "alignment_heads",
    "pharaoh",
    "source_word_index",
    "target_word_index",
    "word_alignment",
]


@dataclass(frozen=True)
class SavedAlignment:
    """A run's saved alignment choice (RUN/alignment.json as read: `data` its JSON, or None with `error`
    saying why it could not be read); checked against the model only when an alignment is asked for, so a
    damaged file never stops plain translation (nor `attnlab heads`, which rewrites it)."""

    path: str  # where it was read, for messages
    data: Any = None  # the parsed JSON
    error: str | None = None  # why it could not be read

    def resolve(self, model: nn.Module) -> tuple[int, list[int]]:
        """(layer, heads) it chooses, or ValueError (one line) naming the file and how to mend it."""
        fix = "run `attnlab heads` on this run again, or delete the file"
        if self.error is not None:
            raise ValueError(f"{self.path} cannot be read ({self.error}); {fix}")
        d = self.data
        ok = isinstance(d, dict) and _index(d.get("layer")) and isinstance(d.get("heads"), list) and d["heads"]
        if not ok or not all(_index(h) for h in d["heads"]):
            raise ValueError(f'{self.path} must hold {{"layer": L, "heads": [H, ...]}} (indices >= 0); {fix}')
        try:
            return alignment_heads(model, d["layer"], d["heads"])
        except ValueError as exc:
            raise ValueError(f"{self.path} does not fit this model: {exc}; {fix}") from None


def _index(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def alignment_heads(
    model: nn.Module, layer: int | None, heads: Sequence[int] | None, saved: SavedAlignment | None = None
) -> tuple[int, list[int]]:
    """The (layer, heads) alignments read, checked against the model; ValueError for a model without
    cross-attention or indices it does not have. With neither layer nor heads given, `saved` (a run's
    alignment.json) chooses, if there is one."""
    kinds = model.attention_kinds() if hasattr(model, "attention_kinds") else {}
    cross = kinds.get("cross") or []
    if not cross:
        raise ValueError(f"alignments need cross-attention; this {type(model).__name__} has none (drop --align)")
    if layer is None and heads is None and saved is not None:
        return saved.resolve(model)
    N = len(cross)
    layer = max(N - 2, 0) if layer is None else layer
    if not 0 <= layer < N:
        raise ValueError(f"align_layer must be a decoder layer 0..{N - 1}, got {layer}")
    H = getattr(cross[layer], "num_heads", 1)
    chosen = list(range(H)) if heads is None else list(heads)
    bad = [h for h in chosen if not 0 <= h < H]
    if bad:
        raise ValueError(f"align_heads must be heads 0..{H - 1} of layer {layer}, got {bad}")
    return layer, chosen


def cross_attention(
    model: nn.Module, src: Tensor, src_valid_lens: Tensor, outputs: list[list[int]], *, bos: int, pad: int,
    layer: int, heads: list[int],
) -> Tensor:  # fmt: skip
    """Cross-attention (B, T, S) of `layer` averaged over `heads`, row t = the step producing output token t
    (T = longest output; rows past an output's end are padding); the decoder's input is `bos` + the output,
    `pad` after its end."""
    T = max(len(o) for o in outputs) or 1
    tgt_in = torch.tensor([[bos] + o + [pad] * (T - len(o)) for o in outputs], device=src.device)[:, :T]
    module = model.attention_kinds()["cross"][layer]
    name = next(n for n, m in model.named_modules() if m is module)
    with inference(model), record_attention(model) as rec:
        model(src, tgt_in, src_valid_lens)
    return attention_maps(rec)[name][:, heads].float().mean(dim=1)  # (B, T, S)


def source_word_index(src_vocab, text: str, ids: Sequence[int]) -> list[int]:
    """The whitespace word of `text` each source token comes from, by encoding the words one by one; where
    that does not reproduce `ids`, tokens are spread over the words in order."""
    words = text.split()
    per_word = [src_vocab.encode(w) for w in words]
    index = [w for w, toks in enumerate(per_word) for _ in toks]
    flat = [t for toks in per_word for t in toks]
    if flat[: len(ids)] == list(ids) and len(index) >= len(ids):
        return index[: len(ids)]
    return [min(t * len(words) // max(len(ids), 1), len(words) - 1) for t in range(len(ids))]


def target_word_index(tgt_vocab, tokens: Sequence[int]) -> list[int]:
    """The whitespace word of the printed translation each target token lands in (decoding each prefix)."""
    total = len(tgt_vocab.decode(list(tokens)).split())
    return [min(max(len(tgt_vocab.decode(list(tokens[: j + 1])).split()) - 1, 0), max(total - 1, 0))
            for j in range(len(tokens))]  # fmt: skip


def word_alignment(attn: Tensor, src_words: Sequence[int], tgt_words: Sequence[int]) -> list[tuple[int, int]]:
    """Pharaoh pairs from token attention attn (T, S) (rows: target tokens, columns: source tokens, <eos>
    excluded), src_words (S,) and tgt_words (T,) the word of each token: one (i, j) per target word j.

    Examples:
        >>> word_alignment(torch.eye(3), [0, 1, 1], [0, 0, 1])   # identity over tokens, merged to words
        [(0, 0), (1, 1)]
    """
    if attn.shape[0] == 0 or attn.shape[1] == 0:
        return []
    Ws, Wt = max(src_words) + 1, max(tgt_words) + 1
    Gs = torch.zeros(Ws, attn.shape[1])
    Gs[list(src_words), range(attn.shape[1])] = 1.0  # sums keys over a word's tokens
    Gt = torch.zeros(Wt, attn.shape[0])
    Gt[list(tgt_words), range(attn.shape[0])] = 1.0
    Gt = Gt / Gt.sum(dim=1, keepdim=True).clamp(min=1)  # averages queries
    merged = Gt @ attn.float() @ Gs.T  # (Wt, Ws)
    return [(int(i), j) for j, i in enumerate(merged.argmax(dim=1).tolist()) if Gt[j].sum() > 0]


def align_batch(translator, texts: Sequence[str], src_ids: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
                layer: int, heads: list[int]) -> list[list[tuple[int, int]]]:  # fmt: skip
    """Alignment pairs of each output (target ids, no <bos>/<eos>) of the source texts[i] (ids src_ids[i])."""
    src_vocab, tgt_vocab, model = translator.src_vocab, translator.tgt_vocab, translator.model
    rows = [list(s) + [src_vocab.eos] for s in src_ids]
    S = max(len(r) for r in rows)
    device = translator.device
    src = torch.tensor([r + [src_vocab.pad] * (S - len(r)) for r in rows], device=device)
    lens = torch.tensor([len(r) for r in rows], device=device)
    produced = [list(o) for o in outputs]
    attn = cross_attention(model, src, lens, produced, bos=translator.bos, pad=tgt_vocab.pad, layer=layer, heads=heads)
    out = []
    for b, (text, ids, toks) in enumerate(zip(texts, src_ids, produced)):
        a = attn[b, : len(toks), : len(ids)].cpu()  # drop padding rows, the <eos> and padding columns
        out.append(word_alignment(a, source_word_index(src_vocab, text, ids), target_word_index(tgt_vocab, toks)))
    return out


def pharaoh(pairs: Sequence[tuple[int, int]]) -> str:
    """'0-0 1-2 ...' (source-target), ordered by target word."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
