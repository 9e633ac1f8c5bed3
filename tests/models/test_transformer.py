"""The Transformer: parity with torch.nn.Transformer, causality, the KV cache, learning, sizes, configs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention import record_attention
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.models import CONFIGS, Transformer, TransformerConfig, build_model

PAD, BOS, EOS = 0, 1, 2


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**kw) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(
        src_vocab_size=13, tgt_vocab_size=11, num_hiddens=16, num_heads=4, num_layers=2, ffn_num_hiddens=32, dropout=0.0
    )
    cfg.update(kw)
    return Transformer(TransformerConfig(**cfg))


def batch(B=3, S=7, T=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 13, (B, S), generator=g)
    lens = torch.tensor([S, 4, 2][:B])
    src = src.masked_fill(torch.arange(S)[None] >= lens[:, None], PAD)
    tgt = torch.randint(3, 11, (B, T), generator=g)
    return src, tgt, lens


# -- parity with torch.nn.Transformer ---------------------------------------------------------------
def _copy_mha(ours, ref: nn.MultiheadAttention):
    ref.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
    ref.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
    ref.out_proj.weight.copy_(ours.W_o.weight)
    ref.out_proj.bias.copy_(ours.W_o.bias)


def _copy_lin(ours, ref):
    ref.weight.copy_(ours.weight)
    ref.bias.copy_(ours.bias)


def reference(model: Transformer) -> nn.Transformer:
    """An nn.Transformer holding `model`'s weights. Post-norm: nn.Transformer would always add a final
    LayerNorm per stack, which the paper's post-norm model lacks, so the stacks are built with norm=None."""
    c = model.config
    kw = dict(
        d_model=c.num_hiddens,
        nhead=c.num_heads,
        dim_feedforward=c.ffn_num_hiddens,
        dropout=0.0,
        batch_first=True,
        norm_first=c.norm_first,
    )
    enc_norm = nn.LayerNorm(c.num_hiddens) if c.norm_first else None
    dec_norm = nn.LayerNorm(c.num_hiddens) if c.norm_first else None
    ref = nn.Transformer(
        custom_encoder=nn.TransformerEncoder(
            nn.TransformerEncoderLayer(**kw), c.num_layers, norm=enc_norm, enable_nested_tensor=False
        ),
        custom_decoder=nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), c.num_layers, norm=dec_norm),
        **kw,
    )
    with torch.no_grad():
        for ours, theirs in zip(model.encoder.blocks, ref.encoder.layers):
            _copy_mha(ours.attention, theirs.self_attn)
            _copy_lin(ours.ffn.dense1, theirs.linear1)
            _copy_lin(ours.ffn.dense2, theirs.linear2)
            _copy_lin(ours.addnorm1.ln, theirs.norm1)
            _copy_lin(ours.addnorm2.ln, theirs.norm2)
        for ours, theirs in zip(model.decoder.blocks, ref.decoder.layers):
            _copy_mha(ours.self_attention, theirs.self_attn)
            _copy_mha(ours.cross_attention, theirs.multihead_attn)
            _copy_lin(ours.ffn.dense1, theirs.linear1)
            _copy_lin(ours.ffn.dense2, theirs.linear2)
            for i in (1, 2, 3):
                _copy_lin(getattr(ours, f"addnorm{i}").ln, getattr(theirs, f"norm{i}"))
        if c.norm_first:
            _copy_lin(model.encoder.final_norm, ref.encoder.norm)
            _copy_lin(model.decoder.final_norm, ref.decoder.norm)
    return ref


@pytest.mark.parametrize("norm_first", [False, True])
def test_parity_with_torch_transformer(norm_first):
    model = tiny(norm_first=norm_first)
    ref = reference(model)
    src, tgt, lens = batch()
    T, D = tgt.shape[1], model.config.num_hiddens
    pad = torch.arange(src.shape[1])[None] >= lens[:, None]  # nn's key_padding_mask: True = ignore
    src_e = model.encoder.pos_encoding(model.encoder.embedding(src) * D**0.5)
    tgt_e = model.decoder.pos_encoding(model.decoder.embedding(tgt) * D**0.5)
    out = ref(
        src_e,
        tgt_e,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(T),
        src_key_padding_mask=pad,
        memory_key_padding_mask=pad,
    )
    expected = model.decoder.dense(out)
    torch.testing.assert_close(model(src, tgt, lens), expected, atol=1e-5, rtol=1e-5)


# -- causality and the cache -------------------------------------------------------------------------
def test_future_target_tokens_never_change_earlier_outputs():
    model = tiny().eval()
    src, tgt, lens = batch()
    base = model(src, tgt, lens)
    for k in range(1, tgt.shape[1]):
        changed = tgt.clone()
        changed[:, k:] = (changed[:, k:] + 1 - 3) % 8 + 3  # different tokens at every future position
        out = model(src, changed, lens)
        torch.testing.assert_close(out[:, :k], base[:, :k], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, k:], base[:, k:])


@pytest.mark.parametrize("kw", [{}, {"norm_first": True}, {"window": 2, "positions": "learned"}])
def test_cached_decoding_equals_full_forward_at_every_step(kw):
    model = tiny(**kw).eval()
    src, tgt, lens = batch(T=8)
    full = model(src, tgt, lens)
    state = model.start_decoding(src, lens)
    logits, state = model.decode_step(tgt[:, :2], state)  # a multi-token first chunk works too
    torch.testing.assert_close(logits, full[:, :2], atol=1e-5, rtol=1e-5)
    for t in range(2, tgt.shape[1]):
        logits, state = model.decode_step(tgt[:, t : t + 1], state)
        assert state.offset == t + 1
        torch.testing.assert_close(logits[:, 0], full[:, t], atol=1e-5, rtol=1e-5)


def test_reorder_state_selects_batch_rows():
    model = tiny().eval()
    src, tgt, lens = batch()
    full = model(src, tgt, lens)
    index = torch.tensor([2, 0, 0])
    state = model.start_decoding(src, lens)
    _, state = model.decode_step(tgt[:, :3], state)
    state = model.reorder_state(state, index)
    logits, _ = model.decode_step(tgt[index, 3:], state)
    torch.testing.assert_close(logits, full[index, 3:], atol=1e-5, rtol=1e-5)


def test_recorded_attention_names_and_shapes():
    model = tiny()
    src, tgt, lens = batch()
    with record_attention(model) as rec:
        model(src, tgt, lens)
    B, S, T = src.shape[0], src.shape[1], tgt.shape[1]
    assert set(rec.weights) == {f"encoder.blocks.{i}.attention" for i in range(2)} | {
        f"decoder.blocks.{i}.{kind}" for i in range(2) for kind in ("self_attention", "cross_attention")
    }
    assert rec.weights["encoder.blocks.0.attention"][0].shape == (B, 4, S, S)
    cross = rec.weights["decoder.blocks.1.cross_attention"][0]
    assert cross.shape == (B, 4, T, S)
    assert (cross[1, :, :, 4:] == 0).all()  # padded source positions get no weight
    self_w = rec.weights["decoder.blocks.0.self_attention"][0]
    assert (self_w.triu(1) == 0).all()  # no step sees the future


# -- learning ----------------------------------------------------------------------------------------
def _task_batch(g, B, fn, V=10, lo=3, hi=7):
    """Random sequences of symbols 3..V-1 (lengths lo..hi-1), padded; target = fn(source)."""
    lens = torch.randint(lo, hi, (B,), generator=g)
    seqs = [torch.randint(3, V, (int(n),), generator=g) for n in lens]
    S = hi - 1
    src = torch.full((B, S), PAD)
    tgt_in = torch.full((B, S + 1), PAD)
    tgt_out = torch.full((B, S + 1), PAD)
    for i, s in enumerate(seqs):
        y = fn(s)
        src[i, : len(s)] = s
        tgt_in[i, : len(y) + 1] = torch.cat([torch.tensor([BOS]), y])
        tgt_out[i, : len(y) + 1] = torch.cat([y, torch.tensor([EOS])])
    return src, lens, tgt_in, tgt_out, [fn(s).tolist() for s in seqs]


@pytest.mark.parametrize("name,fn", [("copy", lambda s: s), ("reverse", lambda s: s.flip(0))])
def test_tiny_transformer_learns_task_exactly(name, fn):
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            10, 10, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64, dropout=0.0, max_len=16
        )
    )
    steps = 200
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    # Linear decay to zero: without it the last steps' noise leaves a few repeated-symbol cases wrong.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / steps)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        src, lens, tgt_in, tgt_out, _ = _task_batch(g, 32, fn)
        logits = model(src, tgt_in, lens)
        loss = F.cross_entropy(logits.reshape(-1, 10), tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    src, lens, _, _, expected = _task_batch(torch.Generator().manual_seed(123), 64, fn)
    assert [h.tokens for h in greedy(model, src, lens, BOS, EOS, max_len=8)] == expected


# -- sizes and configs -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "setting,low,high",
    [
        (dict(), 63e6, 65e6),  # paper: 65M
        (dict(num_hiddens=1024, num_heads=16, ffn_num_hiddens=4096, dropout=0.3), 210e6, 216e6),  # paper: 213M
    ],
)
def test_parameter_count_matches_the_paper(setting, low, high):
    cfg = TransformerConfig(37000, 37000, share_embeddings=True, **setting)
    with torch.device("meta"):
        model = Transformer(cfg)
    n = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    assert low <= n <= high, n


def test_norm_first_runs_and_has_final_norms():
    model = tiny(norm_first=True)
    src, tgt, lens = batch()
    out = model(src, tgt, lens)
    assert out.shape == (3, 6, 11) and torch.isfinite(out).all()
    assert isinstance(model.encoder.final_norm, nn.LayerNorm)
    assert isinstance(tiny().encoder.final_norm, nn.Identity)
    out.sum().backward()


def test_share_embeddings_ties_the_three_matrices():
    model = tiny(src_vocab_size=11, share_embeddings=True)
    w = model.encoder.embedding.weight
    assert model.decoder.embedding.weight is w and model.decoder.dense.weight is w
    with pytest.raises(ValueError, match="share_embeddings"):
        tiny(share_embeddings=True)  # 13 != 11


def test_bad_configs_raise():
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(10, 10, num_hiddens=30, num_heads=4)
    with pytest.raises(ValueError, match=r"\['colour'\].*num_hiddens"):
        TransformerConfig.from_dict({"src_vocab_size": 5, "tgt_vocab_size": 5, "colour": 1})
    with pytest.raises(ValueError, match="tgt_vocab_size"):
        TransformerConfig.from_dict({"src_vocab_size": 5})
    with pytest.raises(ValueError, match="unknown model type"):
        build_model("lstm", {})


def test_config_json_round_trip_and_build_model():
    cfg = TransformerConfig(12, 14, num_hiddens=16, num_heads=2, num_layers=1, ffn_num_hiddens=8, window=3)
    d = json.loads(json.dumps(cfg.to_dict()))
    assert CONFIGS["transformer"].from_dict(d) == cfg
    model = build_model("transformer", d)
    assert isinstance(model, Transformer) and model.config == cfg and model.MODEL_TYPE == "transformer"
