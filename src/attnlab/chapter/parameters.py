"""The chapter's parameter counts and complexity tables: single vs multi-head attention, the FFN, the whole
Transformer (shared or separate embeddings), and per-layer complexity; `params` gathers them as a
`ChapterResult` (see attnlab.chapter)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from attnlab.attention import MultiHeadAttention
from attnlab.chapter.result import ChapterResult
from attnlab.models import PositionWiseFFN, Transformer, TransformerConfig


def count_parameters(module: torch.nn.Module) -> int:
    """Number of distinct parameters (shared/tied tensors counted once)."""
    seen, total = set(), 0
    for p in module.parameters():  # .parameters() already de-duplicates tied tensors
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


class AttentionParams(NamedTuple):
    """One row of `attention_param_table`."""

    name: str
    heads: int
    head_dim: int
    parameters: int
    formula: int  # 4·d²


class FFNParams(NamedTuple):
    """One row of `ffn_param_table`."""

    name: str
    d: int
    hidden: int
    expansion: float
    parameters: int
    formula: int  # 2·d·f + d + f


class TransformerParams(NamedTuple):
    """One row of `transformer_param_table`."""

    setting: str
    d: int
    heads: int
    layers: int  # encoder blocks
    decoder_layers: int
    ffn: int
    vocab: int
    tied: str  # "yes" / "no": shared source/target embeddings and output projection
    parameters: int
    approx: str  # e.g. "63.1M"
    paper: str  # the count the paper reports, for comparison ("-" for untied rows)


def attention_param_table(num_hiddens: int = 512, num_heads: int = 8):
    """Single-head vs multi-head projection parameters, counted on real modules (meta device).
    Returns (headers, [AttentionParams])."""

    rows = []
    with torch.device("meta"):  # shapes only: no memory, no init cost
        for h in (1, num_heads):
            n = count_parameters(MultiHeadAttention(num_hiddens, h, bias=False))
            rows.append(
                AttentionParams(f"{'single' if h == 1 else 'multi'}-head", h, num_hiddens // h, n, 4 * num_hiddens**2)
            )
    return [f"attention (d={num_hiddens}, no bias)", "heads", "head dim", "parameters", "4·d²"], rows


class KVCacheRow(NamedTuple):
    """One row of `kv_cache_table`."""

    name: str
    kv_heads: int
    parameters: int  # of one attention module
    bytes_fp32: int  # KV cache per target token, every decoder layer
    bytes_fp16: int


def kv_cache_table(num_hiddens: int = 512, num_heads: int = 8, num_kv_heads: int | None = None, num_layers: int = 6):
    """Multi-head vs grouped-query vs multi-query attention: projection parameters of one module
    (counted on real modules, meta device) and the decoder's KV cache per generated token, keys and
    values of `num_layers` decoder blocks' self-attention, `TransformerConfig.kv_cache_bytes` (cross-attention
    adds the same per source token; the encoder caches nothing). Returns (headers, [KVCacheRow])."""
    kinds = {num_heads: "multi-head", 1: "multi-query"}
    if num_kv_heads is not None and num_kv_heads not in kinds:
        kinds[num_kv_heads] = "grouped-query"
    rows = []
    for kv in sorted(kinds, reverse=True):
        with torch.device("meta"):
            n = count_parameters(MultiHeadAttention(num_hiddens, num_heads, bias=False, num_kv_heads=kv))
        cfg = TransformerConfig(1, 1, num_hiddens, num_heads, decoder_layers=num_layers, num_kv_heads=kv)
        rows.append(KVCacheRow(kinds[kv], kv, n, cfg.kv_cache_bytes(1, 0, 4), cfg.kv_cache_bytes(1, 0, 2)))
    headers = [f"attention (d={num_hiddens}, {num_heads} heads)", "KV heads", "parameters"]
    return headers + [f"KV bytes/token ({num_layers} decoder layers, fp32)", "fp16"], rows


# The paper's Table 3 settings, and base with a one-block decoder (Kasai et al. 2021, "Deep Encoder, Shallow
# Decoder"); all share one 37,000-token BPE vocabulary between source, target and the pre-softmax projection.
# `paper` is the count the paper reports, for comparison only.
TRANSFORMER_SETTINGS: dict[str, dict[str, Any]] = {
    "base": dict(num_hiddens=512, num_heads=8, num_layers=6, ffn_num_hiddens=2048, vocab_size=37000, paper="65M"),
    "big": dict(num_hiddens=1024, num_heads=16, num_layers=6, ffn_num_hiddens=4096, vocab_size=37000, paper="213M"),
    "base 6+1": dict(
        num_hiddens=512, num_heads=8, num_layers=6, decoder_layers=1, ffn_num_hiddens=2048, vocab_size=37000, paper="-"
    ),
}


def ffn_param_table(num_hiddens: int = 512, ffn_num_hiddens: int = 2048):
    """Position-wise FFN: expansion ratio and parameters, counted on the model's own module.
    Returns (headers, [FFNParams])."""

    with torch.device("meta"):
        n = count_parameters(PositionWiseFFN(num_hiddens, ffn_num_hiddens))
    return (
        ["FFN", "d", "hidden", "expansion", "parameters", "2·d·f + d + f"],
        [
            FFNParams(
                "position-wise FFN",
                num_hiddens,
                ffn_num_hiddens,
                ffn_num_hiddens / num_hiddens,
                n,
                2 * num_hiddens * ffn_num_hiddens + num_hiddens + ffn_num_hiddens,
            )
        ],
    )


def transformer_param_table(share_embeddings_variants: Sequence[bool] = (True, False)):
    """Whole-model parameter counts at the paper's base and big settings.

    Counted by building `attnlab.models.Transformer` on the meta device (shapes only, no memory).
    The paper ties the source/target embeddings and the output projection (share_embeddings);
    the untied rows show what that saves. Returns (headers, [TransformerParams]).
    """

    rows = []
    for share in share_embeddings_variants:
        for name, s in TRANSFORMER_SETTINGS.items():
            cfg = TransformerConfig(
                src_vocab_size=s["vocab_size"],
                tgt_vocab_size=s["vocab_size"],
                num_hiddens=s["num_hiddens"],
                num_heads=s["num_heads"],
                num_layers=s["num_layers"],
                decoder_layers=s.get("decoder_layers"),
                ffn_num_hiddens=s["ffn_num_hiddens"],
                share_embeddings=share,
            )
            with torch.device("meta"):
                n = count_parameters(Transformer(cfg))
            rows.append(
                TransformerParams(
                    name,
                    cfg.num_hiddens,
                    cfg.num_heads,
                    cfg.num_layers,
                    cfg.decoder_depth,
                    cfg.ffn_num_hiddens,
                    s["vocab_size"],
                    "yes" if share else "no",
                    n,
                    f"{n / 1e6:.1f}M",
                    s["paper"] if share else "-",
                )
            )
    return (
        [
            "Transformer",
            "d",
            "heads",
            "enc. layers",
            "dec. layers",
            "ffn",
            "vocab",
            "tied emb.",
            "parameters",
            "≈",
            "paper",
        ],
        rows,
    )


def complexity_table():
    """Per-layer cost, sequential operations and maximum path length (Vaswani et al., Table 1).

    n sequence length, d representation size, k convolution kernel size. These are asymptotic
    facts about the layer types, not measurements.
    """
    return (
        ["layer", "cost per layer", "sequential ops", "max path length"],
        [
            ["CNN (kernel k)", "O(k·n·d²)", "O(1)", "O(n/k), O(log_k n) dilated"],
            ["RNN", "O(n·d²)", "O(n)", "O(n)"],
            ["self-attention", "O(n²·d)", "O(1)", "O(1)"],
        ],
    )


def params(
    num_hiddens: int = 512,
    num_heads: int = 8,
    ffn_num_hiddens: int = 2048,
    num_kv_heads: int | None = None,
    num_layers: int = 6,
) -> ChapterResult:
    """The parameter tables, the KV-cache table and the complexity table (no figures)."""
    att = attention_param_table(num_hiddens, num_heads)
    kv = kv_cache_table(num_hiddens, num_heads, num_kv_heads, num_layers)
    ffn = ffn_param_table(num_hiddens, ffn_num_hiddens)
    tr = transformer_param_table()
    single, multi = (row.parameters for row in att[1])
    tied = {r.setting: r.parameters for r in tr[1] if r.tied == "yes"}
    untied = {r.setting: r.parameters for r in tr[1] if r.tied == "no"}
    ffn_params = ffn[1][0].parameters
    same = "costs no parameters" if single == multi else "changes the parameter count"
    paragraph = (
        f"Splitting d={num_hiddens} into {num_heads} heads of {num_hiddens // num_heads} features "
        f"{same}: single-head attention holds {single:,} projection parameters, multi-head "
        f"{multi:,} (4·d² = {4 * num_hiddens**2:,}). The position-wise FFN expands each position "
        f"{ffn_num_hiddens / num_hiddens:g}x and holds {ffn_params:,} parameters, "
        f"{ffn_params / multi:.1f}x the attention's. Built on the meta device, the base "
        f"Transformer has {tied['base'] / 1e6:.1f}M parameters with the paper's tied embeddings "
        f"({untied['base'] / 1e6:.1f}M untied), {tied['base 6+1'] / 1e6:.1f}M with one decoder block under its "
        f"six encoder blocks (the decoder runs once per token, the encoder once per sentence). Self-attention "
        f"connects any two positions in one step (path length O(1)) and runs in parallel, at a cost quadratic in "
        f"sequence length. Sharing key/value heads shrinks what decoding caches per token: "
        f"{kv[1][0].bytes_fp32:,} bytes with {kv[1][0].kv_heads} KV heads, {kv[1][-1].bytes_fp32:,} with one "
        f"(float32, {num_layers} decoder layers)."
    )
    return ChapterResult(
        "Parameters and complexity",
        paragraph,
        tables=[att, kv, ffn, tr, complexity_table()],
        data={
            "single_head": single,
            "multi_head": multi,
            "transformer": tied,
            "transformer_untied": untied,
            "kv_cache": [r._asdict() for r in kv[1]],
        },
    )
