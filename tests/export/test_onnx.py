"""`attnlab export --format onnx` against the outside runtime: onnxruntime's greedy decoding of the three graphs
gives attnlab's fp32 greedy tokens, and their attention outputs equal attnlab's recorded weights (1e-5), for
a tiny trained run and for untrained models of every position scheme, grouped-query heads, local attention
and pre-norm; the files and names are Optimum's seq2seq layout; int8 stays within its stated tolerance."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab import explain
from attnlab.cli import main
from attnlab.export.onnx import OnnxTranslator, check_exportable
from attnlab.runs.loading import load_translator
from attnlab.testing import train_tiny

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

SENTENCES = ["i'm home .", "go .", "he's calm .", "we are friends .", "i like apples .", "they won ."]
FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("onnx") / "tiny", steps=20)


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx-out") / "model"
    assert main(["export", "--format", "onnx", "--checkpoint", str(run), "--out", str(out)]) == 0
    return out


def _check_against_attnlab(run, folder, sentences, atol=1e-5):
    """Token identity (one sentence at a time and in one padded batch) and attention within atol."""
    translator = load_translator(run)
    onnx_tr = OnnxTranslator(folder, threads=1)
    ids = translator.encode(sentences)
    for i, s in enumerate(sentences):
        ref = explain(translator, s, translator.options(beam=1))
        got = onnx_tr.greedy([ids[i]], attentions=True)[0]
        assert translator.tgt_vocab.to_tokens(got.tokens) == ref.tgt_tokens[: len(got.tokens)], s
        assert got.finished == ref.finished and len(ref.tgt_tokens) == len(got.tokens) + got.finished, s
        for kind in ("encoder_self", "decoder_self", "cross"):
            want = ref.maps[kind].numpy()
            assert got.attentions[kind].shape == want.shape, (s, kind)
            np.testing.assert_allclose(got.attentions[kind], want, atol=atol, rtol=0, err_msg=f"{s} {kind}")
    batch = onnx_tr.greedy(ids)  # one padded batch, as attnlab decodes one
    greedy = translator.search(ids, translator.options(beam=1, scores=False), batch_size=len(ids))
    assert [o.tokens for o in batch] == [hs[0].tokens for hs in greedy]


def test_optimum_layout_and_config(exported):
    for name in FILES:
        onnx.checker.check_model(str(exported / name))
    names = {
        name: ([i.name for i in g.graph.input], [o.name for o in g.graph.output])
        for name in FILES
        for g in [onnx.load(str(exported / name))]
    }
    assert names["encoder_model.onnx"] == (
        ["input_ids", "attention_mask"],
        ["last_hidden_state", "encoder_attentions.0", "encoder_attentions.1"],
    )
    dec_in, dec_out = names["decoder_model.onnx"]
    assert dec_in == ["input_ids", "encoder_hidden_states", "encoder_attention_mask"]
    assert dec_out[:5] == ["logits", *(f"present.0.{s}.{w}" for s in ("decoder", "encoder") for w in ("key", "value"))]
    assert dec_out[-4:] == ["decoder_attentions.0", "decoder_attentions.1", "cross_attentions.0", "cross_attentions.1"]
    past_in, past_out = names["decoder_with_past_model.onnx"]
    assert past_in[:4] == [
        "input_ids",
        "encoder_attention_mask",
        "past_key_values.0.decoder.key",
        "past_key_values.0.decoder.value",
    ]
    assert "past_key_values.1.encoder.value" in past_in and not any(".encoder." in n for n in past_out)
    config = json.loads((exported / "config.json").read_text())
    tgt = config["special_tokens"]["target"]
    assert config["decoder_start_token_id"] == tgt["bos"]["id"] and tgt["eos"]["token"] == "<eos>"
    assert config["source_ends_with_eos"] and config["max_output_tokens"] == 200
    assert (exported / "src_vocab.json").is_file() and (exported / "tgt_vocab.json").is_file()


def test_greedy_and_attention_equal_attnlab(run, exported):
    _check_against_attnlab(run, exported, SENTENCES)


@pytest.mark.parametrize(
    "overrides",
    [
        {"positions": "rope", "position_options": {"fraction": 0.5}, "num_kv_heads": 1},
        {"positions": "alibi", "position_options": {}, "num_heads": 4, "num_kv_heads": 2},
        {"positions": "t5", "position_options": {}, "norm_first": True, "window": 1},
        {"positions": "learned", "position_options": {}, "tie_output": True, "activation": "gelu"},
        {"positions": "none", "position_options": {}},
        {"position_options": {"layout": "split"}, "embed_scale": 1.0},
    ],
    ids=["rope-mqa", "alibi-gqa", "t5-prenorm-window", "learned-tied-gelu", "none", "split-sinusoids"],
)
def test_schemes_and_heads_export(run, tmp_path, overrides):
    """Untrained models (random weights give arbitrary but definite argmaxes) of each layout."""
    other, out = _untrained_export(run, tmp_path, overrides)
    _check_against_attnlab(other, out, SENTENCES[:2])


@pytest.mark.parametrize("encoder, decoder", [(3, 1), (1, 2)])
def test_unequal_depths_export_a_cache_per_decoder_block(run, tmp_path, encoder, decoder):
    other, out = _untrained_export(run, tmp_path, {"num_layers": encoder, "decoder_layers": decoder})
    config = json.loads((out / "config.json").read_text())
    assert (config["num_layers"], config["decoder_layers"]) == (encoder, decoder)
    enc_out = [o.name for o in onnx.load(str(out / FILES[0])).graph.output]
    past_in = [i.name for i in onnx.load(str(out / FILES[2])).graph.input]
    assert enc_out == ["last_hidden_state", *(f"encoder_attentions.{i}" for i in range(encoder))]
    assert len([n for n in past_in if n.startswith("past_key_values.")]) == 4 * decoder
    _check_against_attnlab(other, out, SENTENCES[:3])
    older = {k: v for k, v in config.items() if k != "decoder_layers"}  # an export before the key: equal depths
    (out / "config.json").write_text(json.dumps(older))
    assert OnnxTranslator(out, threads=1).decoder_layers == encoder


def _untrained_export(run, tmp_path, overrides):
    """An untrained model of the tiny run's config with `overrides`, saved as a run and exported to ONNX."""
    from attnlab.models import Transformer, TransformerConfig
    from attnlab.runs.weights import save_weights

    cfg = json.loads((run / "config.json").read_text())
    cfg["model"].update(overrides)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.from_dict(cfg["model"]))
    cfg["model"] = model.config.to_dict()  # as the config normalises it (learned_positions)
    other = tmp_path / "run"
    other.mkdir()
    for name in ("src_vocab.json", "tgt_vocab.json"):
        (other / name).write_bytes((run / name).read_bytes())
    (other / "config.json").write_text(json.dumps(cfg))
    save_weights(model, other / "model.safetensors")
    out = tmp_path / "onnx"
    assert main(["export", "--format", "onnx", "--checkpoint", str(other), "--out", str(out)]) == 0
    return other, out


def test_int8_within_tolerance(run, exported, tmp_path):
    """Stated tolerance for int8 (onnxruntime's dynamic quantization): the decoder's first-step logits within
    a tenth of their fp32 spread, and the same greedy translation for most sentences."""
    out = tmp_path / "int8"
    assert (
        main(["export", "--format", "onnx", "--checkpoint", str(run), "--out", str(out), "--quantization", "int8"]) == 0
    )
    assert json.loads((out / "config.json").read_text())["quantization"] == "int8"
    assert (out / "decoder_model.onnx").stat().st_size < (exported / "decoder_model.onnx").stat().st_size
    fp32, int8 = OnnxTranslator(exported, threads=1), OnnxTranslator(out, threads=1)
    ids = [fp32.encode(s) + [fp32.src_eos] for s in SENTENCES[:1]]
    feeds = {"input_ids": np.array(ids), "attention_mask": np.ones((1, len(ids[0])), dtype=np.int64)}
    step = {"input_ids": np.array([[fp32.bos]]), "encoder_attention_mask": feeds["attention_mask"]}
    logits = [
        tr.decoder.run(["logits"], {**step, "encoder_hidden_states": tr.encoder.run(["last_hidden_state"], feeds)[0]})[
            0
        ]
        for tr in (fp32, int8)
    ]
    spread = float(logits[0].max() - logits[0].min())
    assert float(np.abs(logits[0] - logits[1]).max()) < 0.1 * spread
    same = sum(a == b for a, b in zip(fp32.translate(SENTENCES), int8.translate(SENTENCES)))
    assert same >= len(SENTENCES) - 2


def test_refusals_are_one_line(run, tmp_path, capsys):
    from attnlab.models import build_model

    with pytest.raises(ValueError, match="Transformer only, got a bahdanau model"):
        check_exportable(build_model("bahdanau", {"src_vocab_size": 10, "tgt_vocab_size": 10}))
    out = tmp_path / "x"
    argv = ["export", "--format", "onnx", "--checkpoint", str(run), "--out", str(out)]
    assert main([*argv, "--quantization", "int8_float32"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown ONNX quantization 'int8_float32'" in err
    assert main([*argv, "--runtime", str(tmp_path)]) == 2
    assert "--runtime applies to --format web only" in capsys.readouterr().err
    assert not out.exists()
