"""A tiny randomly initialised MarianMTModel and its MarianTokenizer, built without network: a
SentencePiece model trained on a few hundred generated sentences, numbered by a Marian-style vocab.json."""

from __future__ import annotations

import io
import json
import random

import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

WORDS = (
    "the cat dog house river green small old walks sleeps sees eats quickly never always "
    "tree bird runs sings under over near my your their little big red blue"
).split()


def sentences(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
        out.append(s.capitalize() + rng.choice([".", "!", "?"]))
    return out


def train_spm(texts: list[str], vocab_size: int = 80) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return buf.getvalue()


@pytest.fixture(scope="session")
def marian_dir(tmp_path_factory):
    """Folder as `save_pretrained` writes it: config.json, model.safetensors, generation_config.json,
    source.spm, target.spm, vocab.json, tokenizer_config.json."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    d = tmp_path_factory.mktemp("marian")
    proto = train_spm(sentences())
    (d / "source.spm").write_bytes(proto)
    (d / "target.spm").write_bytes(proto)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if sp.IdToPiece(i) not in ("<unk>", "<s>", "</s>")]
    # Marian's numbering: </s>=0, <unk>=1, the pieces, <pad> last (also the decoder start token).
    tokens = ["</s>", "<unk>", *pieces, "<pad>"]
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    MarianTokenizer(str(d / "source.spm"), str(d / "target.spm"), str(d / "vocab.json")).save_pretrained(d)
    V = len(tokens)
    cfg = MarianConfig(
        vocab_size=V,
        decoder_vocab_size=V,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=128,
        pad_token_id=V - 1,
        eos_token_id=0,
        decoder_start_token_id=V - 1,
        forced_eos_token_id=None,
        init_std=0.3,
    )  # the default 0.02 makes a tiny model ignore its source
    torch.manual_seed(0)
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:  # not the identity LayerNorm of a fresh init: mapping errors show
                p.add_(0.1 * torch.randn_like(p))
        # A random bias, and <eos> made likely enough that sentences end at different lengths.
        model.final_logits_bias.copy_(0.5 * torch.randn_like(model.final_logits_bias))
        model.final_logits_bias[0, 0] += 1.0
    model.generation_config.bad_words_ids = [[V - 1]]  # as OPUS-MT models: never emit <pad>
    model.save_pretrained(d)
    return d
