"""Head masks (explicit and per-context), pruning, and the fused QKV projection."""

import threading

import pytest
import torch

from attnlab.attention import MultiHeadAttention, mask_heads, prune_heads, record_attention


def make(bias=True, H=4, D=16, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(D, H, bias=bias).eval()


def math_with_zeroed_head(m, q, k, v, head, **kw):
    """Reference: the explicit math path, then zero one head's output before W_o (by hand)."""
    B, Lq, _ = q.shape
    qh, kh, vh = m.split_heads(m.W_q(q)), m.split_heads(m.W_k(k)), m.split_heads(m.W_v(v))
    out, _ = m._math(qh, kh, vh, kw.get("valid_lens"), None, kw.get("causal", False))
    out = out.clone()
    out[:, head] = 0
    return m.W_o(out.transpose(1, 2).reshape(B, Lq, -1))


@pytest.mark.parametrize("self_attn", [True, False])
def test_head_mask_on_fused_path_equals_zeroing_the_head_on_math_path(self_attn):
    m = make()
    x, mem = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    k = x if self_attn else mem
    lens = torch.tensor([5, 2, 4]) if self_attn else torch.tensor([7, 3, 1])
    for head in range(4):
        mask = torch.ones(4)
        mask[head] = 0
        got = m(x, k, k, valid_lens=lens, head_mask=mask)
        expected = math_with_zeroed_head(m, x, k, k, head, valid_lens=lens)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        with record_attention(m):  # the recorded path honours the mask too
            torch.testing.assert_close(m(x, k, k, valid_lens=lens, head_mask=mask), expected, atol=1e-5, rtol=0)


def test_float_gate_scales_head_and_has_a_gradient():
    m = make()
    x = torch.randn(2, 3, 16)
    gate = torch.tensor([1.0, 0.5, 1.0, 2.0], requires_grad=True)
    m(x, x, x, head_mask=gate).sum().backward()
    assert gate.grad is not None and gate.grad.shape == (4,)


def test_context_mask_equals_explicit_mask_and_stays_in_its_thread():
    m = make()
    x = torch.randn(2, 4, 16)
    full = m(x, x, x)
    explicit = m(x, x, x, head_mask=torch.tensor([1, 0, 1, 1]))
    other = []
    with mask_heads(m, {"MultiHeadAttention": [1, 0, 1, 1]}):
        torch.testing.assert_close(m(x, x, x), explicit)
        t = threading.Thread(target=lambda: other.append(m(x, x, x)))
        t.start()
        t.join()
    torch.testing.assert_close(other[0], full)  # the other thread never saw the mask
    torch.testing.assert_close(m(x, x, x), full)


@pytest.mark.parametrize(
    "bad, msg",
    [
        ([1, 0, 1], r"shape \(4,\)"),
        (torch.ones(2, 4), r"shape \(4,\)"),
        ([1, float("nan"), 1, 1], "finite"),
        ("abc", "4 numbers"),
    ],
)
def test_bad_head_mask_is_one_clear_error(bad, msg):
    m = make()
    x = torch.randn(1, 2, 16)
    with pytest.raises(ValueError, match=msg):
        m(x, x, x, head_mask=bad)


def test_mask_heads_bad_module_name():
    m = torch.nn.ModuleDict({"a": make()})
    with (
        pytest.raises(ValueError, match="no multi-head attention module named 'b'"),
        mask_heads(m, {"b": [1, 1, 1, 1]}),
    ):
        pass


@pytest.mark.parametrize("heads", [[1], [0, 3], [0, 1, 2, 3]])
def test_pruned_equals_masked(heads):
    m = make()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    lens = torch.tensor([6, 2])
    mask = torch.ones(4)
    mask[heads] = 0
    expected_self = m(x, x, x, causal=True, head_mask=mask)
    expected_cross = m(x, mem, mem, valid_lens=lens, head_mask=mask)
    model = torch.nn.ModuleDict({"att": m})
    prune_heads(model, {"att": heads})
    assert m.num_heads == 4 - len(heads) and m.W_q.weight.shape == (4 * (4 - len(heads)), 16)
    assert m.W_o.weight.shape == (16, 4 * (4 - len(heads)))
    torch.testing.assert_close(m(x, x, x, causal=True), expected_self, atol=1e-5, rtol=0)
    torch.testing.assert_close(m(x, mem, mem, valid_lens=lens), expected_cross, atol=1e-5, rtol=0)


def test_prune_bad_index():
    model = torch.nn.ModuleDict({"att": make()})
    with pytest.raises(ValueError, match=r"heads 0..3, got head index 4"):
        prune_heads(model, {"att": [4]})


def test_fused_qkv_equals_three_projections():
    m = make()
    x = torch.randn(2, 5, 16)
    fused = m(x, x, x, valid_lens=torch.tensor([5, 3]))
    separate = m(x, x.clone(), x.clone(), valid_lens=torch.tensor([5, 3]))  # not `is`: three matmuls
    torch.testing.assert_close(fused, separate, atol=1e-5, rtol=0)
    # Gradients still reach the book's four nn.Linear weights.
    fused.sum().backward()
    assert all(getattr(m, n).weight.grad is not None for n in ("W_q", "W_k", "W_v", "W_o"))
