"""Hugging Face Marian import/export: logits parity at 1e-4, greedy and beam-4 identical to `generate`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from ..conftest import sentences

pytest.importorskip("transformers")

TEXTS = [
    "The cat sees the old tree.",
    "My dog never sleeps!",
    "Big red bird sings near their little house?",
    "Your small river",
]


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory, one_thread):
    from attnlab.export.marian import import_hf
    from attnlab.runs.loading import load_translator

    run = import_hf(marian_dir, tmp_path_factory.mktemp("run") / "opus")
    return load_translator(run)


@pytest.fixture(scope="module")
def hf(marian_dir):
    from transformers import MarianMTModel, MarianTokenizer

    return MarianMTModel.from_pretrained(marian_dir).eval(), MarianTokenizer.from_pretrained(marian_dir)


def _batch(tr, texts):
    ids = [tr.src_vocab.encode(t) + [tr.src_vocab.eos] for t in texts]
    S = max(map(len, ids))
    src = torch.tensor([s + [tr.src_vocab.pad] * (S - len(s)) for s in ids])
    return src, torch.tensor([len(s) for s in ids])


def test_tokenizer_matches_marian_tokenizer(imported, hf):
    _, tok = hf
    src, lens = _batch(imported, TEXTS)
    want = tok(TEXTS, padding=True, return_tensors="pt")
    assert torch.equal(src, want["input_ids"])
    assert torch.equal(lens, want["attention_mask"].sum(1))
    ids = tok(text_target=TEXTS[0])["input_ids"]
    assert imported.tgt_vocab.decode(ids) == tok.decode(ids, skip_special_tokens=True)


def test_logits_equal_transformers(imported, hf):
    model, _ = hf
    src, lens = _batch(imported, TEXTS)
    g = torch.Generator().manual_seed(1)
    tgt = torch.randint(0, len(imported.tgt_vocab) - 1, (len(TEXTS), 7), generator=g)
    tgt[:, 0] = model.config.decoder_start_token_id
    mask = (torch.arange(src.shape[1])[None] < lens[:, None]).long()
    with torch.no_grad():
        want = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = imported.model(src, tgt, lens)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    # The cached step-by-step path gives the same logits (suppressed <pad> aside).
    with torch.no_grad():
        state = imported.model.start_decoding(src, lens)
        steps = torch.cat([imported.model.decode_step(tgt[:, t : t + 1], state)[0] for t in range(tgt.shape[1])], 1)
    keep = [i for i in range(want.shape[-1]) if i not in imported.model.config.suppress_tokens]
    torch.testing.assert_close(steps[..., keep], want[..., keep], atol=1e-4, rtol=1e-4)


def _generate(tr, hf, texts, beam):
    model, tok = hf
    enc = tok(texts, padding=True, return_tensors="pt")
    limit = tr.output_limit(enc["input_ids"].shape[1])
    with torch.no_grad():
        out = model.generate(
            **enc,
            num_beams=beam,
            do_sample=False,
            max_new_tokens=limit,
            length_penalty=1.0,
            forced_eos_token_id=None,
            num_return_sequences=1,
        )
    eos, pad = tr.tgt_vocab.eos, tr.tgt_vocab.pad
    rows = []
    for row in out[:, 1:].tolist():  # drop the decoder start token
        row = row[: row.index(eos)] if eos in row else row
        rows.append([t for t in row if t != pad])
    return rows


@pytest.mark.parametrize("beam", [1, 4])
def test_decoding_identical_to_generate(imported, hf, beam):
    texts = TEXTS + sentences(12, seed=5)
    src_ids = [imported.src_vocab.encode(t) for t in texts]
    ours = [hs[0].tokens for hs in imported.search(src_ids, imported.options(beam=beam, scores=False))]
    want = _generate(imported, hf, texts, beam)
    assert ours == want
    lengths = {len(o) for o in ours}
    assert len(lengths) > 1, "every output has the same length: the test does not exercise <eos>"


def test_translate_and_explain_work_on_imported_model(imported):
    from attnlab.analysis.explanation import explain

    out = imported.translate(TEXTS[:2], options=imported.options(beam=2))
    assert all(isinstance(t, str) for t in out)
    ex = explain(imported, TEXTS[0])
    assert ex is not None


def test_export_round_trip_of_imported_model(imported, marian_dir, tmp_path, hf):
    from transformers import MarianMTModel, MarianTokenizer

    from attnlab.export.marian import export_hf

    run = tmp_path / "run"
    from attnlab.export.marian import import_hf

    import_hf(marian_dir, run)
    out = export_hf(run, tmp_path / "hf")
    model = MarianMTModel.from_pretrained(out).eval()
    tok = MarianTokenizer.from_pretrained(out)
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    ref_model, ref_tok = hf
    assert torch.equal(enc["input_ids"], ref_tok(TEXTS, padding=True, return_tensors="pt")["input_ids"])
    tgt = torch.full((len(TEXTS), 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        got = model(**enc, decoder_input_ids=tgt).logits
        want = ref_model(**enc, decoder_input_ids=tgt).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("options", [dict(), dict(share_embeddings=True, bias=False, activation="gelu")])
def test_export_book_model_with_interleaved_sinusoids(tmp_path, options, one_thread):
    """The book's layout is exported by permuting the hidden basis: logits equal at 1e-4."""
    from transformers import MarianMTModel, PreTrainedTokenizerFast

    from attnlab.data import Vocab
    from attnlab.export.marian import export_hf
    from attnlab.models import Transformer, TransformerConfig
    from attnlab.runs.config import write_run_config
    from attnlab.runs.weights import save_weights

    words = [s.lower().rstrip(".!?").split() for s in sentences(50)]
    vocab = Vocab(words, min_freq=1)
    cfg = TransformerConfig(
        len(vocab),
        len(vocab),
        num_hiddens=12,
        num_heads=3,
        num_layers=2,
        ffn_num_hiddens=24,
        dropout=0.0,
        max_len=64,
        **options,
    )
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln." in name or name.endswith("dense.bias"):
                p.add_(0.1 * torch.randn_like(p))
    run = tmp_path / "run"
    write_run_config(run, "transformer", cfg.to_dict(), {}, {}, src_vocab=vocab, tgt_vocab=vocab)
    save_weights(model, run / "model.safetensors")
    out = export_hf(run, tmp_path / "hf")
    hf_model = MarianMTModel.from_pretrained(out).eval()
    src = torch.tensor([[5, 6, 7, 8, vocab.eos], [9, 10, vocab.eos, vocab.pad, vocab.pad]])
    lens = torch.tensor([5, 3])
    tgt = torch.tensor([[vocab.bos, 4, 5, 6], [vocab.bos, 7, 8, 9]])
    with torch.no_grad():
        want = model(src, tgt, lens)
        got = hf_model(input_ids=src, attention_mask=(src != vocab.pad).long(), decoder_input_ids=tgt).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    tok = PreTrainedTokenizerFast.from_pretrained(out)
    assert tok("the cat sleeps")["input_ids"] == vocab.encode("the cat sleeps") + [vocab.eos]


@pytest.mark.parametrize(
    "option, words",
    [
        (dict(norm_first=True), "norm_first"),  # the README's refusals: pre-norm,
        (dict(window=2), "window"),  # local attention,
        (dict(positions="learned"), "positions='learned'"),  # learned positions;
        (dict(embed_scale=3.0), "embed_scale"),  # and a scale Marian has no setting for
        (dict(positions="rope"), "positions='rope'"),  # position schemes other than the sinusoids
        (dict(positions="alibi"), "positions='alibi'"),
        (dict(positions="t5"), "positions='t5'"),
        (dict(positions="none"), "positions='none'"),
        (dict(num_kv_heads=1), "num_kv_heads=1"),  # and shared key/value heads
    ],
)
def test_export_refuses_options_marian_lacks(tmp_path, capsys, option, words):
    from attnlab.cli import main
    from attnlab.data import Vocab
    from attnlab.export.marian import export_hf
    from attnlab.models import Transformer, TransformerConfig
    from attnlab.runs.config import write_run_config
    from attnlab.runs.weights import save_weights

    vocab = Vocab(["a", "b"], min_freq=1)
    cfg = TransformerConfig(
        len(vocab), len(vocab), num_hiddens=8, num_heads=2, num_layers=1, ffn_num_hiddens=8, **option
    )
    write_run_config(tmp_path / "run", "transformer", cfg.to_dict(), {}, {}, src_vocab=vocab, tgt_vocab=vocab)
    save_weights(Transformer(cfg), tmp_path / "run" / "model.safetensors")
    with pytest.raises(ValueError, match=words):
        export_hf(tmp_path / "run", tmp_path / "hf")
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--format", "hf", "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "hf").exists()


def test_export_refuses_a_bahdanau_run(tmp_path):
    from attnlab.data import Vocab
    from attnlab.export.marian import export_hf
    from attnlab.models import build_model
    from attnlab.runs.config import write_run_config
    from attnlab.runs.weights import save_weights

    vocab = Vocab(["a", "b"], min_freq=1)
    cfg = dict(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), embed_size=4, num_hiddens=4, num_layers=1)
    write_run_config(tmp_path / "run", "bahdanau", cfg, {}, {}, src_vocab=vocab, tgt_vocab=vocab)
    save_weights(build_model("bahdanau", cfg), tmp_path / "run" / "model.safetensors")
    with pytest.raises(ValueError, match="only Transformer runs"):
        export_hf(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize(
    "change, option",
    [
        ({"model_type": "bart"}, "model_type"),
        ({"activation_function": "tanh"}, "activation_function"),
        ({"decoder_ffn_dim": 64}, "encoder_ffn_dim/decoder_ffn_dim"),  # depths may differ, block shapes not
        ({"decoder_layers": 3}, "says decoder_layers=3 but .* holds 2 decoder layers"),  # a depth its weights lack
        ({"decoder_layers": 1}, "says decoder_layers=1 but .* holds 2 decoder layers"),  # layers it would leave unread
        ({"normalize_before": True}, "normalize_before"),
    ],
)
def test_import_refuses_what_attnlab_lacks(marian_dir, tmp_path, change, option):
    import shutil

    from attnlab.cli import main

    src = tmp_path / "src"
    shutil.copytree(marian_dir, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(change)
    (src / "config.json").write_text(json.dumps(cfg))
    from attnlab.export.marian import import_hf

    with pytest.raises(ValueError, match=option.replace("/", ".")):
        import_hf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert main(["import", "hf", str(src), "--out", str(tmp_path / "out")]) == 2


def test_import_command(marian_dir, tmp_path, capsys):
    from attnlab.cli import main

    assert main(["import", "hf", str(marian_dir), "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert main(["translate", "--checkpoint", str(tmp_path / "run"), "The cat sleeps."]) == 0
    assert main(["import", "hf", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    assert "config.json" in capsys.readouterr().err


def test_spm_vocab_round_trip(imported, tmp_path):
    from attnlab.data import load_vocab

    v = imported.tgt_vocab
    v.save(tmp_path / "v.json")
    w = load_vocab(tmp_path / "v.json")
    assert w == v and (w.pad, w.eos, w.unk, w.bos) == (v.pad, v.eos, v.unk, v.bos)
    ids = w.encode("The old dog.")
    assert w.decode(ids + [w.eos, 5, 6]) == "The old dog."
    with pytest.raises(ValueError, match="no bos"):
        _ = type(v)(v.model_proto, v.idx_to_token, {"unk": "<unk>"}).bos


def test_core_does_not_import_transformers():
    code = (
        "import sys, attnlab, attnlab.cli; attnlab.cli.build_parser(); import attnlab.export.marian, attnlab.data.spm;"
        "assert 'transformers' not in sys.modules, 'transformers imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
