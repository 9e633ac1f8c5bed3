"""Hugging Face Marian (OPUS-MT) models into attnlab (the way out: `attnlab.export.marian.exporter`).

    import_hf(SOURCE, OUT): a folder saved by `MarianMTModel.save_pretrained` (+ `MarianTokenizer`:
        source.spm, target.spm, vocab.json) -> an attnlab run folder (config.json, model.safetensors,
        src_vocab.json / tgt_vocab.json as `SentencePieceVocab`). Needs only `sentencepiece`.
    export_hf(RUN, OUT): an attnlab Transformer run folder -> a folder `MarianMTModel.from_pretrained`
        loads (and `MarianTokenizer` / `PreTrainedTokenizerFast` for its tokenizer). Needs `transformers`.

Marian is attnlab's Transformer with options (see `TransformerConfig`): post-norm blocks, biases on every
projection, FFN activation swish, embeddings scaled by sqrt(D) (`scale_embedding`), sinusoids with the
sines in the first half of the features and the cosines in the second ("split"), a final logits bias
(attnlab's output `dense.bias`), and decoding that starts from <pad> and never emits it.

Weights are matched module by module (not by attnlab parameter names), so the mapping follows the
model's structure: each block's LayerNorms in the order the block applies them.

The book's interleaved sinusoids on export: the exported model is made exactly equivalent by permuting
the hidden basis. Interleaved and split sinusoids are the same columns in another order, and every
operation on the residual stream (embeddings, projections in and out of it, LayerNorm, which only pools
over features) commutes with a permutation of the features, so permuting every tensor's hidden axis
gives the same logits with Marian's split sinusoids. Refusing would have shut out every model trained
with the book's defaults, for no loss of exactness.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from attnlab.attention.positions import sinusoidal_encoding
from attnlab.data.spm import SentencePieceVocab
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.config import write_run_config
from attnlab.runs.outputs import claim_output, write_output
from attnlab.runs.weights import check_config_size, check_finite, save_weights
from attnlab.utils.files import read_json_object

from .config import marian_to_config, refuse
from .weights import check_header, check_shapes, read_hf_weights, stored, weight_map, weight_shapes, weights_file


# Marian config keys that attnlab cannot follow when they take another value than this.
def _marian_vocabs(source: Path, hf: dict, lang: tuple[str | None, str | None]):
    tok_cfg = {}
    if (source / "tokenizer_config.json").is_file():
        tok_cfg = read_json_object(source / "tokenizer_config.json", "tokenizer config")
    for name in ("source.spm", "target.spm", "vocab.json"):
        if not (source / name).is_file():
            raise FileNotFoundError(
                f"{source / name} is missing: attnlab imports the MarianTokenizer files "
                f"(source.spm, target.spm, vocab.json) saved beside the model"
            )

    def table(path: Path, size: int) -> list[str]:
        enc = read_json_object(path, "MarianTokenizer vocabulary")
        tokens: list[str | None] = [None] * size
        for tok, i in enc.items():
            if isinstance(i, bool) or not isinstance(i, int):
                raise ValueError(
                    f"{path} maps {tok!r} to {i!r}, not to an integer id; re-save the tokenizer with "
                    f"MarianTokenizer.save_pretrained or download the model again"
                )
            if 0 <= i < size:
                tokens[i] = tok
        holes = [i for i, t in enumerate(tokens) if t is None]
        if holes:
            raise ValueError(
                f"{path} numbers no token for ids {holes[:5]} of the model's {size}; "
                f"the tokenizer and the model do not match"
            )
        return [t for t in tokens if t is not None]  # all of them: no holes

    src_tokens = table(source / "vocab.json", hf["vocab_size"])
    target_file = tok_cfg.get("target_vocab_file") if tok_cfg.get("separate_vocabs") else None
    tgt_file = source / (Path(target_file).name if isinstance(target_file, str) else "vocab.json")
    tgt_tokens = table(tgt_file, hf.get("decoder_vocab_size") or hf["vocab_size"])
    pad = hf.get("pad_token_id")
    start = hf.get("decoder_start_token_id", pad)

    def specials(tokens):
        # Marian's decoder starts from decoder_start_token_id (its <pad>): that is attnlab's "bos" role.
        unk = tok_cfg.get("unk_token", "<unk>")
        return {
            "unk": unk if isinstance(unk, str) else "<unk>",
            "pad": tokens[pad],
            "eos": tokens[hf["eos_token_id"]],
            "bos": tokens[start],
        }

    def vocab(spm: str, table_file: Path, tokens: list[str], language):
        try:
            return SentencePieceVocab.from_file(
                source / spm, tokens, specials(tokens), lang=language if isinstance(language, str) else None
            )
        except ValueError as exc:
            if str(source / spm) in str(exc):
                raise
            raise ValueError(f"{source / spm} with {table_file}: {exc}") from exc

    return vocab("source.spm", source / "vocab.json", src_tokens, lang[0]), vocab(
        "target.spm", tgt_file, tgt_tokens, lang[1]
    )


# --------------------------------------------------------------------------- import
def import_hf(source: str | os.PathLike, out: str | os.PathLike, force: bool = False) -> Path:
    """Convert a saved MarianMTModel folder into an attnlab run folder `out`; returns `out`.

    `out` must be new, or (with `force`) an earlier attnlab run that holds nothing else (see
    `attnlab.runs.outputs`). Everything is checked and built in memory, then written into a temp folder
    renamed into place, so a failure never leaves a half-written run.
    """

    source, out = Path(source), Path(out)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(
            f"{source / 'config.json'} is missing: SOURCE must be a local folder saved by "
            f"save_pretrained (see README: huggingface-cli download ... --local-dir)"
        )
    claim = claim_output(out, "run", force=force, sources=[source])
    hf = read_json_object(source / "config.json", "Hugging Face model config")
    gen_path = source / "generation_config.json"
    gen = read_json_object(gen_path, "generation config") if gen_path.is_file() else {}
    cfg_dict = marian_to_config(hf, gen)
    cfg = TransformerConfig.from_dict(cfg_dict)
    # The config is compared with the weights' header, its sizes with this machine's memory, and then with
    # every weight's shape on a meta-device model, before anything is allocated: a config.json asking for
    # gigabytes (or 100,000 layers) fails in one line at once.
    weights_path = weights_file(source)
    shapes = weight_shapes(weights_path)
    check_header(cfg_dict, shapes, weights_path)
    check_config_size("transformer", cfg_dict, 4, str(source / "config.json"))
    with torch.device("meta"):
        skeleton = Transformer(cfg)
    check_shapes(skeleton, shapes, weights_path)
    src_vocab, tgt_vocab = _marian_vocabs(source, hf, (hf.get("source_lang"), hf.get("target_lang")))
    weights = read_hf_weights(weights_path)
    check_finite(weights.items(), weights_path)

    # Marian's positions must be the fixed split sinusoids attnlab computes (they are not trained);
    # recent transformers versions do not even save them.
    for side in ("encoder", "decoder"):
        P = weights.get(f"model.{side}.embed_positions.weight", weights.get(f"{side}.embed_positions.weight"))
        if P is None:
            continue
        if P.dim() != 2 or P.shape[1] != cfg.num_hiddens:
            refuse(f"{side}.embed_positions", tuple(P.shape), f"a (positions, {cfg.num_hiddens}) table")
        ref = sinusoidal_encoding(torch.arange(P.shape[0]), P.shape[1], "split")
        if not torch.allclose(P.float(), ref, atol=1e-4):
            refuse(f"{side}.embed_positions", "trained values", "fixed split sinusoids")

    model = Transformer(cfg)
    with torch.no_grad():
        for key, tensor, _ in weight_map(model):
            tensor.copy_(stored(weights, key).float())
        bias = weights.get("final_logits_bias")
        zeros = torch.zeros(cfg.tgt_vocab_size)
        model.decoder.dense.bias.copy_(bias.reshape(-1).float() if bias is not None else zeros)

    with write_output(claim) as tmp:
        data = {
            "source": "hf",
            "hf_source": str(source.resolve()),
            "hf_model_type": "marian",
            "generation": {k: gen[k] for k in ("num_beams", "max_length", "length_penalty") if k in gen},
        }
        write_run_config(tmp, "transformer", cfg.to_dict(), {}, data, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
        save_weights(model, tmp / "model.safetensors")
    return out


__all__ = ["import_hf"]
