"""attnlab.utils.precision: feature detection, `auto`, training autocast, bf16 / int8 decoding, and the hooks."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from train_helpers import needs_data, tiny_run

from attnlab.decoding.greedy_search import greedy
from attnlab.models import Transformer, TransformerConfig, build_model
from attnlab.utils.precision import autocast, cpu_features, int8_layers, prepare_for_inference, resolve_precision

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_transformer(seed: int = 0, **over) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(
        src_vocab_size=20, tgt_vocab_size=20, num_hiddens=32, num_heads=2, num_layers=1, ffn_num_hiddens=64, dropout=0.0
    )
    return Transformer(TransformerConfig(**{**cfg, **over})).eval()


def test_cpu_features_reads_proc_cpuinfo_flags():
    feats = cpu_features()
    assert isinstance(feats, set) and feats
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        pytest.skip("no-procfs: no /proc/cpuinfo here")
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), None)
    if line:
        assert feats == set(line.split(":", 1)[1].lower().split())


@pytest.mark.parametrize(
    "flags, picked",
    [({"avx2"}, "fp32"), ({"avx2", "avx512_bf16"}, "bf16"), ({"amx_bf16", "amx_tile"}, "bf16"), (set(), "fp32")],
)
def test_auto_picks_bf16_only_with_native_support(monkeypatch, flags, picked):
    monkeypatch.setattr("attnlab.utils.precision.cpu_features", lambda: flags)
    choice = resolve_precision("auto", "cpu", training=True)
    assert choice.asked == "auto" and choice.picked == picked
    assert ("absent" in choice.reason) == (picked == "fp32")  # the reason says why


def test_explicit_precisions_are_kept_and_bad_names_rejected():
    assert resolve_precision("fp32").picked == "fp32"
    assert resolve_precision("bf16", training=True).picked == "bf16"
    assert resolve_precision("int8").picked == "int8"
    with pytest.raises(ValueError, match=r"unknown precision 'fp16'.*auto, fp32, bf16, int8"):
        resolve_precision("fp16")
    with pytest.raises(ValueError, match="for training"):
        resolve_precision("int8", training=True)
    with pytest.raises(ValueError, match="CPU only"):
        resolve_precision("int8", "cuda")


def test_autocast_runs_matmuls_in_bf16_and_keeps_fp32_master_weights():
    model = tiny_transformer().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    src = torch.randint(3, 20, (4, 6))
    tgt = torch.randint(3, 20, (4, 5))
    with autocast(resolve_precision("bf16", training=True), "cpu"):
        logits = model(src, tgt, torch.tensor([6, 5, 4, 3]))
    assert logits.dtype == torch.bfloat16
    nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt.flatten()).backward()
    opt.step()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(v.dtype == torch.float32 for s in opt.state.values() for v in s.values() if v.dim())
    with autocast(resolve_precision("fp32"), "cpu"):
        assert model(src, tgt).dtype == torch.float32


def test_bf16_inference_is_a_bf16_copy_that_decodes_like_fp32():
    model = tiny_transformer()
    fast = prepare_for_inference(model, "bf16")
    assert fast is not model and all(p.dtype == torch.bfloat16 for p in fast.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the caller's weights untouched
    src = torch.randint(3, 20, (8, 7))
    ref = model(src, src[:, :5])
    out = fast(src, src[:, :5]).float()
    torch.testing.assert_close(out, ref, atol=0.15, rtol=0.05)
    assert prepare_for_inference(model, "fp32") is model


def test_int8_quantizes_linear_layers_except_the_output_projection():
    model = tiny_transformer()
    q = prepare_for_inference(model, "int8")
    kinds = {name: type(m) for name, m in q.named_modules()}
    assert kinds["decoder.dense"] is nn.Linear  # kept in fp32 (INT8_KEEP_FP32)
    quantized = [n for n, t in kinds.items() if "quantized" in t.__module__ and t.__name__ == "Linear"]
    assert "encoder.blocks.0.attention.W_q" in quantized and "decoder.blocks.0.ffn.dense1" in quantized
    assert sorted(quantized) == sorted(int8_layers(model))
    assert type(model.encoder.blocks[0].attention.W_q) is nn.Linear  # the original stays fp32
    src = torch.randint(3, 20, (8, 7))
    torch.testing.assert_close(q(src, src[:, :5]), model(src, src[:, :5]), atol=0.1, rtol=0.05)
    # Decoding runs through the quantized model with the same protocol.
    hyps = greedy(q, src, None, bos=1, eos=2, max_len=6)
    assert len(hyps) == 8


def test_int8_with_a_custom_keep_list_and_tied_embeddings():
    model = tiny_transformer(share_embeddings=True)
    q = prepare_for_inference(model, "int8", keep_fp32=())
    assert "quantized" in type(q.decoder.dense).__module__
    assert int8_layers(model, keep_fp32=()) == [n for n, m in model.named_modules() if type(m) is nn.Linear]


def test_int8_refuses_unsupported_models_and_devices():
    bahdanau = build_model(
        "bahdanau",
        {
            "src_vocab_size": 20,
            "tgt_vocab_size": 20,
            "embed_size": 8,
            "num_hiddens": 8,
            "num_layers": 1,
            "dropout": 0.0,
        },
    )
    with pytest.raises(ValueError, match=r"Transformer only.*bahdanau"):
        prepare_for_inference(bahdanau, "int8")
    with pytest.raises(ValueError, match="CPU only"):
        prepare_for_inference(tiny_transformer(), "int8", device="cuda")


def test_train_config_rejects_unknown_precision():
    from attnlab.training.config import TrainConfig

    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precision="fp16")
    assert TrainConfig().precision == "auto"


@needs_data
def test_training_records_what_auto_picked_and_bf16_trains(tmp_path, monkeypatch):
    run = tmp_path / "run"
    tiny_run(run, precision="auto")
    cfg = json.loads((run / "config.json").read_text())
    expected = resolve_precision("auto", "cpu", training=True)
    assert cfg["precision"] == expected.to_dict() and cfg["train"]["precision"] == "auto"
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "precision" and e["picked"] == expected.picked for e in events)
    result = tiny_run(tmp_path / "bf16", precision="bf16")
    assert all(torch.isfinite(torch.tensor(result.losses)))
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["precision"]["picked"] == "bf16"
    # The run's weights stay fp32 (autocast keeps fp32 master weights).
    from attnlab.runs.loading import load_translator
    from attnlab.runs.weights import read_weights

    assert all(t.dtype == torch.float32 for t in read_weights(tmp_path / "bf16" / "model.safetensors").values())
    for p in ("fp32", "bf16", "int8"):
        tr = load_translator(run, precision=p)
        assert tr.precision.picked == p
        assert len(tr.translate(["go ."])) == 1
    with pytest.raises(ValueError, match="unknown precision"):
        load_translator(run, precision="fp8")


@needs_data
def test_cli_precision_flags(tmp_path, capsys):
    from attnlab.cli import main

    run = tmp_path / "run"
    tiny_run(run)
    assert main(["translate", "--checkpoint", str(run), "--precision", "int8", "go ."]) == 0
    assert capsys.readouterr().out.strip()
    with pytest.raises(SystemExit):
        main(["translate", "--checkpoint", str(run), "--precision", "fp8", "go ."])
    assert "invalid choice" in capsys.readouterr().err
    bahdanau = tmp_path / "bahdanau"
    tiny_run(bahdanau, model_type="bahdanau")
    assert main(["translate", "--checkpoint", str(bahdanau), "--precision", "int8", "go ."]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Transformer only" in err


def test_train_flag_reaches_the_config():
    from attnlab.cli import build_parser
    from attnlab.commands._train_config import overrides as _overrides

    args = build_parser().parse_args(["train", "--preset", "tiny", "--precision", "bf16"])
    assert _overrides(args)["train"]["precision"] == "bf16"
    for cmd in ("train", "translate", "evaluate", "serve"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([cmd, "--precision", "fp16"])
    assert build_parser().parse_args(["serve", "--precision", "int8"]).precision == "int8"
