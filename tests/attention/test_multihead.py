import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnlab.attention import KVCache, MultiHeadAttention, record_attention, window_mask


def copy_to_torch(ours: MultiHeadAttention, bias: bool) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.num_hiddens, ours.num_heads, bias=bias, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        ref.out_proj.weight.copy_(ours.W_o.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
            ref.out_proj.bias.copy_(ours.W_o.bias)
    return ref.eval()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_parity_with_torch_multihead(bias, padded):
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4, bias=bias).eval()
    ref = copy_to_torch(ours, bias)
    q, kv = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    lens = torch.tensor([7, 3, 1])
    kpm = torch.arange(7)[None] >= lens[:, None] if padded else None  # torch: True = ignore
    expected, ref_w = ref(q, kv, kv, key_padding_mask=kpm, average_attn_weights=False)
    got = ours(q, kv, kv, valid_lens=lens if padded else None)
    assert (got - expected).abs().max() <= 1e-5
    with record_attention(ours) as rec:
        got_math = ours(q, kv, kv, valid_lens=lens if padded else None)
    assert (got_math - expected).abs().max() <= 1e-5
    torch.testing.assert_close(rec.weights["MultiHeadAttention"][0], ref_w, atol=1e-5, rtol=0)


def test_parity_with_causal_attn_mask():
    torch.manual_seed(1)
    ours = MultiHeadAttention(8, 2, bias=True).eval()
    ref = copy_to_torch(ours, True)
    x = torch.randn(2, 6, 8)
    expected, _ = ref(x, x, x, attn_mask=nn.Transformer.generate_square_subsequent_mask(6))
    assert (ours(x, x, x, causal=True) - expected).abs().max() <= 1e-5


@settings(max_examples=20, deadline=None)
@given(
    B=st.integers(1, 3),
    L=st.integers(1, 8),
    H=st.sampled_from([1, 2, 4]),
    causal=st.booleans(),
    window=st.one_of(st.none(), st.integers(0, 4)),
    data=st.data(),
)
def test_fused_equals_math_path(B, L, H, causal, window, data):
    torch.manual_seed(0)
    m = MultiHeadAttention(8, H, bias=True, window=window).eval()
    x = torch.randn(B, L, 8)
    lens = torch.tensor(data.draw(st.lists(st.integers(0, L), min_size=B, max_size=B)))
    fused = m(x, x, x, valid_lens=lens, causal=causal)
    with record_attention(m) as rec:
        math = m(x, x, x, valid_lens=lens, causal=causal)
    torch.testing.assert_close(fused, math, atol=1e-5, rtol=0)
    W = rec.weights["MultiHeadAttention"][0]
    assert W.shape == (B, H, L, L)
    if causal:
        assert torch.all(W.triu(1) == 0)


def test_causal_outputs_ignore_the_future():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 6, 8)
    y = x.clone()
    y[:, 4:] = torch.randn(1, 2, 8)
    torch.testing.assert_close(m(x, x, x, causal=True)[:, :4], m(y, y, y, causal=True)[:, :4])


def test_kv_cache_equals_full_attention_at_every_step():
    torch.manual_seed(0)
    self_attn = MultiHeadAttention(8, 2, bias=True).eval()
    cross = MultiHeadAttention(8, 2, bias=True).eval()
    x, mem = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    src_lens = torch.tensor([4, 2])
    full = cross(self_attn(x, x, x, causal=True), mem, mem, valid_lens=src_lens)
    c_self, c_cross = KVCache(), KVCache(static=True)
    for t in range(5):
        step = x[:, t : t + 1]
        h = self_attn(step, step, step, causal=True, cache=c_self)
        out = cross(h, mem, mem, valid_lens=src_lens, cache=c_cross)
        torch.testing.assert_close(out[:, 0], full[:, t], atol=1e-5, rtol=0)
    assert len(c_self) == 5 and len(c_cross) == 4


def test_cache_reorder_selects_rows():
    c = KVCache()
    c.update(torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1))
    c.reorder(torch.tensor([2, 2, 0]))
    assert c.k.flatten().tolist() == [2.0, 2.0, 0.0]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens", [None, [600, 333]])
def test_blockwise_local_equals_dense_band(causal, lens):
    torch.manual_seed(0)
    L, w = 600, 37
    local = MultiHeadAttention(16, 2, window=w, block_size=64).eval()
    dense = MultiHeadAttention(16, 2).eval()
    dense.load_state_dict(local.state_dict())
    x = torch.randn(2, L, 16)
    vl = None if lens is None else torch.tensor(lens)
    assert local._use_blockwise(L, L, vl, None)
    got = local(x, x, x, valid_lens=vl, causal=causal)
    band = window_mask(L, L, w, causal)
    expected = dense(x, x, x, valid_lens=vl, mask=band)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_local_window_restricts_recorded_weights():
    m = MultiHeadAttention(8, 2, window=1).eval()
    x = torch.randn(1, 5, 8)
    with record_attention(m) as rec:
        m(x, x, x)
    W = rec.weights["MultiHeadAttention"][0][0, 0]
    far = (torch.arange(5)[:, None] - torch.arange(5)[None]).abs() > 1
    assert torch.all(W[far] == 0)


def test_bad_construction_and_inputs():
    with pytest.raises(ValueError, match="multiple of num_heads"):
        MultiHeadAttention(10, 3)
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="8 features"):
        m(torch.randn(1, 2, 4), torch.randn(1, 2, 4), torch.randn(1, 2, 4))
    with pytest.raises(ValueError, match="does not broadcast"):
        m(torch.randn(1, 2, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8), mask=torch.ones(2, 2, dtype=torch.bool))


def test_recording_names_nested_modules_and_stops_afterwards():
    model = nn.ModuleDict({"enc": MultiHeadAttention(8, 2), "dec": MultiHeadAttention(8, 2)})
    x = torch.randn(1, 3, 8)
    with record_attention(model) as rec:
        model["enc"](x, x, x)
        model["dec"](x, x, x)
        model["dec"](x, x, x)
    assert set(rec.weights) == {"enc", "dec"} and len(rec.weights["dec"]) == 2
    assert not any(m.recording for m in model.values())
    with pytest.raises(ValueError, match="no attnlab attention module"), record_attention(nn.Linear(2, 2)):
        pass
