"""Where the C kernel does not run, a bf16 decoding step's attention on the CPU runs as matmul-softmax-matmul:
the same result as SDPA."""

import torch

from attnlab.kernels.few_queries import decoding_on_cpu, few_queries_attention


def test_few_queries_matches_sdpa_in_bf16_with_and_without_a_key_mask():
    torch.manual_seed(0)
    q, k, v = (torch.randn(6, 4, n, 16).bfloat16() for n in (1, 9, 9))
    visible = torch.rand(6, 1, 1, 9) > 0.3
    visible[..., 0] = True  # every row sees a key, as the decoding paths guarantee
    assert decoding_on_cpu(q) and not decoding_on_cpu(q.float())
    for mask in (None, visible):
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
        got = few_queries_attention(q, k, v, mask)
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), ref, atol=3e-2, rtol=3e-2)
