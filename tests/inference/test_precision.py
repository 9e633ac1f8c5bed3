"""attnlab.inference.precision: feature detection, `auto`, training autocast, bf16 / int8 decoding, and the hooks."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch import nn
from train_helpers import needs_data, tiny_run

from attnlab.data import Vocab
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.translator import Translator
from attnlab.inference.precision import (
    autocast,
    cpu_features,
    decoding_model,
    int8_layers,
    prepare_for_inference,
    resolve_precision,
)
from attnlab.inference.quantize import Int8Linear, has_fbgemm
from attnlab.models import Transformer, TransformerConfig, build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


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
    "flags, training, model_type, picked",
    [
        ({"avx2"}, False, "transformer", "fp32"),
        ({"avx2", "avx512_bf16"}, False, "transformer", "bf16"),
        ({"avx2", "avx512_bf16", "avx512_vnni"}, False, "transformer", "int8"),
        ({"avx2", "avx_vnni"}, False, "transformer", "int8"),
        ({"avx2", "avx512_bf16", "avx512_vnni"}, False, "bahdanau", "bf16"),  # int8 decodes Transformers only
        ({"avx2", "avx512_bf16", "avx512_vnni"}, True, "transformer", "bf16"),  # the bf16 compute copy pays
        ({"avx2", "avx512_bf16"}, True, "bahdanau", "fp32"),  # bf16 training measured for the Transformer only
        ({"avx2"}, True, "transformer", "fp32"),
        ({"amx_bf16", "amx_tile"}, True, "transformer", "bf16"),
        (set(), False, "transformer", "fp32"),
    ],
)
def test_auto_picks_what_is_native_and_measured_to_pay(monkeypatch, flags, training, model_type, picked):
    monkeypatch.setattr("attnlab.inference.precision.cpu_features", lambda: flags)
    choice = resolve_precision("auto", "cpu", training=training, model_type=model_type)
    assert choice.asked == "auto" and choice.picked == picked
    assert choice.reason.startswith("auto: ") and choice.reason.endswith(f"-> {picked}")  # the reason says why


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


def test_int8_quantizes_every_linear_and_decodes_like_fp32():
    model = tiny_transformer()
    q = prepare_for_inference(model, "int8")
    kinds = {name: type(m) for name, m in q.named_modules()}
    quantized = [n for n, t in kinds.items() if t is Int8Linear]  # INT8_KERNEL: per-row activation scales
    assert "decoder.dense" in quantized and "encoder.blocks.0.attention.W_q" in quantized  # INT8_KEEP_FP32 = ()
    assert sorted(n for n in quantized if not n.endswith((".W_qkv", ".W_kv"))) == sorted(int8_layers(model))
    assert "encoder.blocks.0.attention.W_qkv" in quantized  # self-attention's three projections, fused
    assert [n for n in quantized if n.endswith(".W_kv")] == ["decoder.blocks.0.cross_attention.W_kv"]
    assert "decoder.blocks.0.cross_attention.W_qkv" not in quantized  # cross-attention: keys and values only
    assert type(model.encoder.blocks[0].attention.W_q) is nn.Linear  # the original stays fp32
    src = torch.randint(3, 20, (8, 7))
    torch.testing.assert_close(q(src, src[:, :5]), model(src, src[:, :5]), atol=0.1, rtol=0.05)
    # Decoding runs through the quantized model with the same protocol.
    hyps = greedy(q, src, None, bos=1, eos=2, max_len=6)
    assert len(hyps) == 8
    kept = prepare_for_inference(model, "int8", keep_fp32=("decoder.dense",))
    assert type(kept.decoder.dense) is nn.Linear


@pytest.mark.skipif(not has_fbgemm(), reason="a PyTorch build without fbgemm")
def test_int8_runs_fbgemm_where_the_cpu_has_no_int8_dot_products(monkeypatch):
    """Without AVX512-VNNI / AVX-VNNI / AMX-INT8, `torch._int_mm` is a scalar loop (many times slower than fp32,
    BENCHMARKS.md "Precision"): int8 runs fbgemm's dynamic Linear there; a kernel asked for by name is kept."""
    monkeypatch.delenv("ATTNLAB_INT8_KERNEL")  # the suite names the per-row kernel (tests/conftest.py)
    model = tiny_transformer()
    kinds = {}
    for name, flags in {"avx512": {"avx2", "avx512_vnni"}, "avx-vnni": {"avx2", "avx_vnni"}, "avx2": {"avx2"}}.items():
        monkeypatch.setattr("attnlab.inference.precision.cpu_features", lambda flags=flags: flags)
        kinds[name] = type(prepare_for_inference(model, "int8").decoder.dense)
    assert kinds["avx2"] is not Int8Linear and kinds["avx2"].__module__.startswith("torch.ao.nn.quantized")
    assert kinds["avx512"] is Int8Linear and kinds["avx-vnni"] is Int8Linear
    assert type(prepare_for_inference(model, "int8", kernel="int_mm").decoder.dense) is Int8Linear
    monkeypatch.setenv("ATTNLAB_NATIVE", "0")  # the per-row recipe on PyTorch's operators, as asked
    assert type(prepare_for_inference(model, "int8").decoder.dense) is Int8Linear
    monkeypatch.setenv("ATTNLAB_INT8_KERNEL", "fbgemm-tensor")
    assert type(prepare_for_inference(model, "int8").decoder.dense) is kinds["avx2"]
    monkeypatch.setenv("ATTNLAB_INT8_KERNEL", "vnni")
    with pytest.raises(ValueError, match="ATTNLAB_INT8_KERNEL='vnni' names no int8 kernel; expected one of"):
        prepare_for_inference(model, "int8")


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
    assert TrainConfig().precision == "fp32"


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
    # The run's weights stay fp32 (the optimizer holds fp32 master weights).
    from attnlab.runs.loading import load_translator
    from attnlab.runs.weights import read_weights

    assert all(t.dtype == torch.float32 for t in read_weights(tmp_path / "bf16" / "model.safetensors").values())
    for p in ("fp32", "bf16", "int8"):
        tr = load_translator(run, precision=p)  # the model converted on the way in
        assert tr.precision.picked == p
        if p == "int8":
            assert any(isinstance(m, Int8Linear) for m in tr.model.modules())
        else:
            assert next(tr.model.parameters()).dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[p]
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
    from attnlab.commands.train import overrides as _overrides

    args = build_parser().parse_args(["train", "--preset", "tiny", "--precision", "bf16"])
    assert _overrides(args)["train"]["precision"] == "bf16"
    for cmd in ("train", "translate", "evaluate", "serve"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([cmd, "--precision", "fp16"])
    assert build_parser().parse_args(["serve", "--precision", "int8"]).precision == "int8"


def _precision_defaults(parser, path=()):
    """(command path, --precision default) for every (sub)command of the CLI that has the flag."""
    import argparse

    for action in parser._actions:
        if "--precision" in action.option_strings:
            yield path, action.default
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _precision_defaults(sub, (*path, name))


def test_fp32_is_the_default_everywhere():
    import inspect

    from attnlab.cli import build_parser
    from attnlab.decoding.translator import Translator
    from attnlab.runs.loading import load_translator
    from attnlab.training.config import TrainConfig

    found = dict(_precision_defaults(build_parser()))
    for cmd in ("train", "translate", "evaluate", "attention", "heads", "serve"):
        assert (cmd,) in found, f"attnlab {cmd} has no --precision"
    # train's flag only overrides the preset/config when given (None); the config's default is fp32.
    assert {p: d for p, d in found.items() if p != ("train",)} == {p: "fp32" for p in found if p != ("train",)}
    assert found[("train",)] is None and TrainConfig().precision == "fp32"
    for fn in (load_translator, decoding_model):
        assert inspect.signature(fn).parameters["precision"].default == "fp32"
    tr = Translator(tiny_transformer(), Vocab([["a"]], min_freq=1), Vocab([["b"]], min_freq=1))
    assert tr.precision.picked == "fp32"


def test_auto_choice_is_recorded_on_the_translator(monkeypatch):
    monkeypatch.setattr("attnlab.inference.precision.cpu_features", lambda: {"avx2", "avx512_vnni"})
    vocab = Vocab([["a", "b"]], min_freq=1)
    model, choice = decoding_model(tiny_transformer(), "auto")
    tr = Translator(model, vocab, vocab, precision=choice)
    assert tr.precision.asked == "auto" and tr.precision.picked == "int8" and "avx512_vnni" in tr.precision.reason
    assert any(isinstance(m, Int8Linear) for m in tr.model.modules())


def test_the_translator_decodes_the_model_it_is_given():
    """Converting is the inference package's (`decoding_model`, which `load_translator` calls): a translator keeps
    its model as given, and a precision name instead of the record of a conversion is refused."""
    model, vocab = tiny_transformer(), Vocab([["a", "b"]], min_freq=1)
    tr = Translator(model, vocab, vocab)
    assert tr.model is model and type(model.decoder.dense) is nn.Linear
    with pytest.raises(TypeError, match="decoding_model"):
        Translator(model, vocab, vocab, precision="int8")
    converted, choice = decoding_model(model, "int8")
    assert Translator(converted, vocab, vocab, precision=choice).model is converted and converted is not model
