"""Head analysis on a tiny model built from the package's sample corpus (no download, seconds)."""

import json

import pytest
import torch
from train_helpers import sample_split, sample_transformer, save_sample_run

from attnlab.analysis import (
    attention_kinds,
    evaluate_with_masks,
    gradient_importance,
    head_statistics,
    pruning_curve,
    save_pruned_run,
)
from attnlab.analysis.heads import validation_batches
from attnlab.attention import mask_heads, record_attention
from attnlab.cli import main
from attnlab.data import sample_data_path
from attnlab.decoding.translator import Translator
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.config import write_run_config
from attnlab.runs.loading import load_translator
from attnlab.runs.weights import save_weights

DATA = sample_split()


@pytest.fixture(scope="module")
def setup(one_thread):
    from attnlab.data import load_data

    data = load_data(DATA)
    model = sample_transformer(data)
    return data, model, Translator(model, data.src_vocab, data.tgt_vocab, {"data": DATA}, max_len=64)


def test_kinds_and_statistics(setup):
    data, model, _ = setup
    kinds = attention_kinds(model)
    assert kinds == {
        "encoder self": ["encoder.blocks.0.attention", "encoder.blocks.1.attention"],
        "decoder self": ["decoder.blocks.0.self_attention", "decoder.blocks.1.self_attention"],
        "cross": ["decoder.blocks.0.cross_attention", "decoder.blocks.1.cross_attention"],
    }
    batches = validation_batches(data.valid, data.src_vocab, data.tgt_vocab, batch_size=4)
    stats = head_statistics(model, batches, data.src_vocab, data.tgt_vocab)
    for name, s in stats.items():
        for h in range(4):
            assert 0 < s["confidence"][h] <= 1 and s["entropy"][h] >= 0
            assert s["same"][h] + s["previous"][h] + s["next"][h] <= 1 + 1e-9
            assert 0 <= s["eos"][h] <= 1 and 0 <= s["punctuation"][h] <= 1
            assert 0 <= s["bos"][h] <= 1 and 0 <= s["first"][h] <= 1
        if "self_attention" in name:  # causal: nothing on the next position
            assert max(s["next"]) == 0
    # Every source sentence ends with <eos> and punctuation occurs in the sample: some weight lands there.
    enc = stats["encoder.blocks.0.attention"]
    assert min(enc["eos"]) > 0 and min(enc["punctuation"]) > 0
    # Sinks: the source holds no <bos>; the decoder's first input is <bos>, so there both shares agree.
    assert max(enc["bos"]) == 0 and min(enc["first"]) > 0
    dec = stats["decoder.blocks.0.self_attention"]
    assert dec["bos"] == pytest.approx(dec["first"]) and min(dec["first"]) > 0


def test_sink_shares_follow_the_weights(setup):
    """ "first" is the mean weight on key 0 over the real queries, as recorded."""
    data, model, _ = setup
    batches = validation_batches(data.valid, data.src_vocab, data.tgt_vocab, batch_size=4)
    stats = head_statistics(model, batches[:1], data.src_vocab, data.tgt_vocab)
    b = batches[0]
    with record_attention(model) as rec:
        model(b.src, b.tgt_in, b.src_valid_lens)
    W = rec.weights["decoder.blocks.1.cross_attention"][0]  # (B, H, T, S)
    real = torch.arange(W.shape[2])[None, :] < b.tgt_valid_lens[:, None]
    want = (W[..., 0] * real[:, None]).sum(dim=(0, 2)) / real.sum()
    assert stats["decoder.blocks.1.cross_attention"]["first"] == pytest.approx(want.tolist())


def float64_loss(model, b):
    """Mean CE per real token, all in float64 (the library's loss casts logits to float32, too coarse for
    finite differences)."""
    logits = model(b.src, b.tgt_in, b.src_valid_lens)
    real = torch.arange(b.tgt_out.shape[1])[None] < b.tgt_valid_lens[:, None]
    return float(torch.nn.functional.cross_entropy(logits[real], b.tgt_out[real]))


def test_gradient_importance_matches_finite_differences(setup):
    data, model, _ = setup
    model = Transformer(model.config).double().eval()
    batches = validation_batches(data.valid[:6], data.src_vocab, data.tgt_vocab, batch_size=6)
    assert len(batches) == 1
    grad = gradient_importance(model, batches)
    eps = 1e-5
    for name in ("encoder.blocks.1.attention", "decoder.blocks.0.cross_attention"):
        for h in range(4):
            losses = []
            for sign in (1, -1):
                gate = torch.ones(4, dtype=torch.float64)
                gate[h] += sign * eps
                with torch.no_grad(), mask_heads(model, {name: gate}):
                    losses.append(float64_loss(model, batches[0]))
            fd = abs(losses[0] - losses[1]) / (2 * eps)
            assert fd == pytest.approx(grad[name][h], rel=1e-4, abs=1e-8)


def test_pruned_model_equals_masked_and_saves_loads(setup, tmp_path):
    data, model, translator = setup
    run = tmp_path / "run"
    save_sample_run(run, model, data)
    heads = {
        "encoder.blocks.0.attention": [1, 2],
        "decoder.blocks.1.cross_attention": [0],
        "decoder.blocks.0.self_attention": [0, 1, 2, 3],
    }
    batch = validation_batches(data.valid, data.src_vocab, data.tgt_vocab, batch_size=8)[0]
    masks = {}
    for name, idx in heads.items():
        masks[name] = torch.ones(4)
        masks[name][idx] = 0
    with torch.no_grad(), mask_heads(model, masks):
        expected = model(batch.src, batch.tgt_in, batch.src_valid_lens)
        expected_ids = [
            hs[0].tokens
            for hs in translator.search([ex.src_ids for ex in data.valid], translator.options(beam=1, scores=False))
        ]
    save_pruned_run(run, heads, tmp_path / "pruned")
    cfg = json.loads((tmp_path / "pruned" / "config.json").read_text())
    assert cfg["model"]["pruned_heads"] == {k: sorted(v) for k, v in heads.items()}
    pruned = load_translator(tmp_path / "pruned")
    m = pruned.model
    assert m.encoder.blocks[0].attention.num_heads == 2 and m.decoder.blocks[0].self_attention.num_heads == 0
    with torch.no_grad():
        got = m(batch.src, batch.tgt_in, batch.src_valid_lens)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert [
        hs[0].tokens for hs in pruned.search([ex.src_ids for ex in data.valid], pruned.options(beam=1, scores=False))
    ] == expected_ids
    # Pruning again counts in current heads and records original indices.
    m.prune_heads({"encoder.blocks.0.attention": [1]})  # current head 1 = original head 3
    assert m.config.pruned_heads["encoder.blocks.0.attention"] == [1, 2, 3]


def test_pruning_curve_starts_at_the_full_model(setup):
    data, model, translator = setup
    ex = data.valid[:5]
    batches = validation_batches(ex, data.src_vocab, data.tgt_vocab)
    grad = gradient_importance(model, batches)
    curve = pruning_curve(translator, ex, batches, grad, "cross", bleu=True)
    assert [p["removed"] for p in curve] == list(range(9))
    assert curve[0] == {"removed": 0, "head": None, **evaluate_with_masks(translator, ex, batches)}
    order = [grad[n][h] for n, h in (p["head"] for p in curve[1:])]
    assert order == sorted(order)
    with pytest.raises(ValueError, match="unknown attention kind"):
        pruning_curve(translator, ex, batches, grad, "nope")


def test_heads_command_end_to_end_and_bad_input(setup, tmp_path, capsys):
    data, model, _ = setup
    run = tmp_path / "run"
    save_sample_run(run, model, data)
    out = tmp_path / "out"
    assert (
        main(
            [
                "heads",
                "--checkpoint",
                str(run),
                "--out",
                str(out),
                "--limit",
                "4",
                "--prune",
                "encoder.blocks.0.attention:0,1",
            ]
        )
        == 0
    )
    report = json.loads((out / "heads.json").read_text())
    assert set(report["masked"]) == set(report["statistics"]) and len(report["pruning_curves"]) == 3
    assert (out / "importance.png").is_file() and (out / "pruning.png").is_file()
    assert (out / "pruned" / "model.safetensors").is_file()
    assert "encoder.blocks.0.attention" in capsys.readouterr().out
    for bad, msg in (
        (["--prune", "encoder.blocks.0.attention:7"], "heads 0..3, got head index 7"),
        (["--prune", "nope:1"], "no multi-head attention module named 'nope'"),
        (["--prune", "encoder.blocks.0.attention"], "MODULE:H"),
        (["--limit", "0"], "--limit"),
    ):
        assert main(["heads", "--checkpoint", str(run), "--out", str(tmp_path / "o2"), *bad]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err


def test_heads_refuses_int8_in_one_line(setup, tmp_path, capsys):
    data, model, _ = setup
    run = tmp_path / "run"
    save_sample_run(run, model, data)
    argv = ["heads", "--checkpoint", str(run), "--out", str(tmp_path / "out"), "--precision", "int8", "--limit", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gradients" in err and "--precision fp32" in err, err
    assert not (tmp_path / "out").exists()


def test_heads_on_a_d2l_run_uses_the_split_it_has(tmp_path, capsys, one_thread):
    """The book's d2l setting trains on every pair and holds no validation split out: the default
    --split valid falls back to the run's largest split, says so on stderr and records it."""
    from attnlab.data import load_data

    d2l = {"loader": "d2l", "path": str(sample_data_path()), "num_examples": 40, "num_steps": 10, "min_freq": 1}
    data = load_data(d2l)
    assert len(data.valid) == 0 and len(data.train) > len(data.test) > 0
    torch.manual_seed(0)
    cfg = TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), 8, 2, 1, 16, dropout=0.0, max_len=16)
    run = tmp_path / "d2l"
    write_run_config(
        run, "transformer", cfg.to_dict(), {"num_steps": 10}, d2l, src_vocab=data.src_vocab, tgt_vocab=data.tgt_vocab
    )
    save_weights(Transformer(cfg), run / "model.safetensors")
    quick = ["--limit", "3", "--no-bleu", "--no-curve"]
    assert main(["heads", "--checkpoint", str(run), "--out", str(tmp_path / "out"), *quick]) == 0
    err = capsys.readouterr().err
    assert "no valid split" in err and "train split" in err, err
    report = json.loads((tmp_path / "out" / "heads.json").read_text())
    assert report["split"] == "train" and report["sentences"] == 3
    # Asked for by name, an empty split is refused in one line naming the splits there are.
    assert main(["heads", "--checkpoint", str(run), "--out", str(tmp_path / "o2"), "--split", "valid", *quick]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--split train" in err and "--split test" in err, err
