"""Marian models whose encoder and decoder differ in depth: a 3+1 MarianMTModel imports with both depths and
`transformers`' logits and greedy tokens, exports back as encoder_layers / decoder_layers, and imports again."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.testing import tiny_marian

from ..conftest import sentences

pytest.importorskip("transformers")

TEXTS = ["The cat sees the old tree.", "My dog never sleeps!", "Your small river"]


@pytest.fixture(scope="module")
def deep_shallow(tmp_path_factory):
    """A 3-encoder-layer, 1-decoder-layer MarianMTModel folder."""
    return tiny_marian(tmp_path_factory.mktemp("marian-3-1"), encoder_layers=3, decoder_layers=1)


def _logits(translator, hf_model, tok, texts):
    enc = tok(texts, padding=True, return_tensors="pt")
    lens = enc["attention_mask"].sum(1)
    g = torch.Generator().manual_seed(1)
    tgt = torch.randint(0, len(translator.tgt_vocab) - 1, (len(texts), 6), generator=g)
    tgt[:, 0] = hf_model.config.decoder_start_token_id
    with torch.no_grad():
        want = hf_model(**enc, decoder_input_ids=tgt).logits
        got = translator.model(enc["input_ids"], tgt, lens)
    return got, want


def test_a_deep_shallow_marian_imports_with_both_depths(deep_shallow, tmp_path, one_thread):
    from transformers import MarianMTModel, MarianTokenizer

    from attnlab.export.marian import import_hf
    from attnlab.runs.loading import load_translator

    run = import_hf(deep_shallow, tmp_path / "run")
    model = json.loads((run / "config.json").read_text())["model"]
    assert (model["num_layers"], model["decoder_layers"]) == (3, 1)
    translator = load_translator(run)
    assert len(translator.model.encoder.blocks) == 3 and len(translator.model.decoder.blocks) == 1
    hf_model, tok = MarianMTModel.from_pretrained(deep_shallow).eval(), MarianTokenizer.from_pretrained(deep_shallow)
    got, want = _logits(translator, hf_model, tok, TEXTS)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    texts = TEXTS + sentences(6, seed=5)
    ours = [hs[0].tokens for hs in translator.search(translator.encode(texts), translator.options(beam=1))]
    enc = tok(texts, padding=True, return_tensors="pt")
    limit = translator.output_limit(enc["input_ids"].shape[1])
    with torch.no_grad():
        out = hf_model.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=limit, forced_eos_token_id=None)
    eos, pad = translator.tgt_vocab.eos, translator.tgt_vocab.pad
    rows = [r[: r.index(eos)] if eos in r else r for r in out[:, 1:].tolist()]
    assert ours == [[t for t in r if t != pad] for r in rows]


def test_export_then_import_keeps_both_depths(deep_shallow, tmp_path, one_thread):
    from transformers import MarianMTModel, MarianTokenizer

    from attnlab.export.marian import export_hf, import_hf
    from attnlab.runs.loading import load_translator

    first = import_hf(deep_shallow, tmp_path / "first")
    exported = export_hf(first, tmp_path / "hf")
    hf = json.loads((exported / "config.json").read_text())
    assert (hf["encoder_layers"], hf["decoder_layers"]) == (3, 1)
    again = load_translator(import_hf(exported, tmp_path / "again"))
    assert (again.model.config.num_layers, again.model.config.decoder_layers) == (3, 1)
    reference = MarianMTModel.from_pretrained(deep_shallow).eval()
    got, want = _logits(again, reference, MarianTokenizer.from_pretrained(deep_shallow), TEXTS)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    got, want = _logits(
        again, MarianMTModel.from_pretrained(exported).eval(), MarianTokenizer.from_pretrained(exported), TEXTS
    )
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_an_attnlab_run_with_a_shallow_decoder_exports_to_marian(tmp_path, one_thread):
    """The book's layout (interleaved sinusoids, permuted on export) at 3 encoder and 1 decoder blocks."""
    from transformers import MarianMTModel

    from attnlab.data import Vocab
    from attnlab.export.marian import export_hf
    from attnlab.models import Transformer, TransformerConfig
    from attnlab.runs.config import write_run_config
    from attnlab.runs.weights import save_weights

    vocab = Vocab([s.lower().rstrip(".!?").split() for s in sentences(50)], min_freq=1)
    cfg = TransformerConfig(
        len(vocab), len(vocab), num_hiddens=12, num_heads=3, num_layers=3, decoder_layers=1, ffn_num_hiddens=24
    )
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    run = tmp_path / "run"
    write_run_config(run, "transformer", cfg.to_dict(), {}, {}, src_vocab=vocab, tgt_vocab=vocab)
    save_weights(model, run / "model.safetensors")
    hf_model = MarianMTModel.from_pretrained(export_hf(run, tmp_path / "hf")).eval()
    assert (hf_model.config.encoder_layers, hf_model.config.decoder_layers) == (3, 1)
    src = torch.tensor([[5, 6, 7, 8, vocab.eos], [9, 10, vocab.eos, vocab.pad, vocab.pad]])
    tgt = torch.tensor([[vocab.bos, 4, 5, 6], [vocab.bos, 7, 8, 9]])
    with torch.no_grad():
        want = model(src, tgt, torch.tensor([5, 3]))
        got = hf_model(input_ids=src, attention_mask=(src != vocab.pad).long(), decoder_input_ids=tgt).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
