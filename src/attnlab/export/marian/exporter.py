"""attnlab run -> a Hugging Face MarianMTModel folder (`attnlab export --format hf`); the mapping of
configs and weights is shared with the import (`attnlab.export.marian.config`, `.weights`; see
`attnlab.export.marian.importer` for why book models with interleaved sinusoids are exported by permuting
the hidden basis)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor

from attnlab.data.spm import SentencePieceVocab
from attnlab.export.pruning import restore_pruned_heads
from attnlab.runs.loading import load_translator
from attnlab.runs.outputs import claim_output, write_output

from .config import config_to_marian
from .weights import weight_map

if TYPE_CHECKING:
    from attnlab.models import Transformer

__all__ = ["export", "export_hf"]


def _hidden_permutation(D: int) -> Tensor:
    """index such that split[k] = interleaved[index[k]]: sines (even columns) first, then cosines."""
    return torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])


def export(run_dir: str | os.PathLike, out_dir: str | os.PathLike, weights=None, force: bool = False) -> Path:
    """`attnlab export --format hf`: the registry's entry point (see `attnlab.export.FORMATS`)."""
    return export_hf(run_dir, out_dir, weights=weights, force=force)


def export_hf(run_dir: str | os.PathLike, out_dir: str | os.PathLike, weights=None, force: bool = False) -> Path:
    """Write an attnlab Transformer run as a MarianMTModel folder (config, weights, tokenizer).

    `out_dir` must be new, or (with `force`) an earlier Hugging Face export (see `attnlab.runs.outputs`)."""

    sources = [run_dir] + ([weights] if weights is not None else [])
    claim = claim_output(out_dir, "export-hf", force=force, sources=sources)
    try:
        from transformers import MarianConfig, MarianMTModel
    except ImportError as exc:
        raise ValueError("export --format hf needs transformers: pip install 'attnlab[hf]'") from exc

    tr = load_translator(run_dir, weights=weights)
    if getattr(tr.model, "MODEL_TYPE", None) != "transformer":
        raise ValueError(f"only Transformer runs can be exported to Marian, {run_dir} holds a {tr.model.MODEL_TYPE}")
    # Marian takes one head count for every module: pruned heads come back as zeros, which compute the same.
    model = restore_pruned_heads(cast("Transformer", tr.model))
    cfg = model.config
    pad, eos = tr.tgt_vocab.pad, tr.tgt_vocab.eos
    if tr.src_vocab.pad != pad or tr.src_vocab.eos != eos:
        raise ValueError("Marian needs one pad and one eos id for both sides; this run's vocabularies differ")
    hf_cfg = config_to_marian(cfg, pad, eos)
    hf_cfg["decoder_start_token_id"] = tr.bos
    index = _hidden_permutation(cfg.num_hiddens) if cfg.position_block.layout == "interleaved" else None
    hf_model = MarianMTModel(MarianConfig(**{k: v for k, v in hf_cfg.items() if k not in ("model_type",)}))
    hf_model.eval()
    target = hf_model.state_dict()
    with torch.no_grad():
        for key, value in target.items():
            if key.endswith(".bias"):
                value.zero_()  # attnlab's bias=False projections are Marian's with zero biases
        for key, tensor, axis in weight_map(model):
            if key not in target:
                continue  # a tied tensor HF stores once
            value = tensor.detach().float()
            if index is not None and axis is not None:
                value = value.index_select(axis, index)
            target[key].copy_(value)
        if "model.shared.weight" in target:
            value = model.encoder.embedding.weight.detach().float()
            target["model.shared.weight"].copy_(value if index is None else value.index_select(1, index))
        target["final_logits_bias"].copy_(model.decoder.dense.bias.detach().float()[None])
    if cfg.suppress_tokens:
        hf_model.generation_config.bad_words_ids = [[t] for t in cfg.suppress_tokens]

    with write_output(claim, {"source_run": str(Path(run_dir).resolve())}) as tmp:
        hf_model.save_pretrained(tmp)
        _save_tokenizer(tr.src_vocab, tr.tgt_vocab, tmp)
    return claim.path


def _save_tokenizer(src_vocab, tgt_vocab, out: Path) -> None:
    """MarianTokenizer files for SentencePiece vocabularies; a `PreTrainedTokenizerFast` (tokenizer.json)
    for attnlab's BPE vocabulary; the book's word vocabulary as a WordLevel tokenizer.json."""

    if isinstance(src_vocab, SentencePieceVocab) and isinstance(tgt_vocab, SentencePieceVocab):
        from transformers import MarianTokenizer

        (out / "source.spm").write_bytes(src_vocab.model_proto)
        (out / "target.spm").write_bytes(tgt_vocab.model_proto)
        separate = src_vocab.idx_to_token != tgt_vocab.idx_to_token
        (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(src_vocab.idx_to_token)}))
        kwargs = {}
        if separate:
            (out / "target_vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tgt_vocab.idx_to_token)}))
            kwargs = dict(separate_vocabs=True, target_vocab_file=str(out / "target_vocab.json"))
        tok = MarianTokenizer(
            str(out / "source.spm"),
            str(out / "target.spm"),
            str(out / "vocab.json"),
            unk_token=src_vocab.specials["unk"],
            eos_token=src_vocab.specials["eos"],
            pad_token=src_vocab.specials["pad"],
            **kwargs,
        )
        tok.save_pretrained(out)
        return
    from transformers import PreTrainedTokenizerFast

    if src_vocab.to_tokens(list(range(len(src_vocab)))) != tgt_vocab.to_tokens(list(range(len(tgt_vocab)))):
        # Marian's tokenizer classes number both sides with one table (vocab.json) unless SentencePiece.
        tokenizer = _tokenizers_object(tgt_vocab)
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
        ).save_pretrained(out / "target_tokenizer")
    tokenizer = _tokenizers_object(src_vocab)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    ).save_pretrained(out)


def _tokenizers_object(vocab):
    """A `tokenizers.Tokenizer` numbering tokens as `vocab` does (BPE: itself; words: a WordLevel table
    with lowercase + punctuation splitting, close to the book's tokenize)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    if getattr(vocab, "kind", None) == "bpe":
        tok = Tokenizer.from_str(vocab.tokenizer.to_str())
    else:
        table = {t: i for i, t in enumerate(vocab.idx_to_token)}
        tok = Tokenizer(models.WordLevel(table, unk_token="<unk>"))
        tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    eos = vocab.to_tokens(vocab.eos)
    tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, vocab.eos)])
    return tok
