"""`gather_rows` (csrc/gather_rows.c) gives `index_select`'s rows on cache-like strided views, and its PyTorch
path names what the C pass does not take."""

import pytest
import torch

from attnlab.attention.cache import KVCache
from attnlab.kernels import loader as native
from attnlab.kernels.gather_rows import gather_rows


def test_the_gather_kernel_builds_where_the_other_kernels_do():
    if native.load("int8_step") is None:
        pytest.skip("no C compiler for attnlab's kernels")
    assert native.load("gather_rows") is not None, native.status("gather_rows")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("filled", [0, 1, 5, 8])
def test_gather_rows_is_index_select_on_views_of_a_cache_buffer(dtype, filled):
    src_buf = torch.randn(6, 3, 8, 4).to(dtype)  # (B, H, capacity, Dh), the first `filled` steps read
    dst_buf = torch.full((9, 3, 8, 4), -7.0, dtype=dtype)
    index = torch.tensor([5, 0, 0, 2, 3, 3, 3, 1, 4])
    gather_rows(dst_buf[:, :, :filled], src_buf[:, :, :filled], index)
    assert torch.equal(dst_buf[:, :, :filled], src_buf[index, :, :filled])
    assert bool((dst_buf[:, :, filled:] == -7.0).all())  # nothing past the filled steps is written


def test_gather_rows_on_rows_that_are_not_whole_blocks():
    src = torch.randn(4, 5, 3, 2).transpose(1, 2)  # (4, 3, 5, 2): steps not back to back
    dst = torch.empty(3, 3, 5, 2)
    index = torch.tensor([3, 1, 3])
    gather_rows(dst, src, index)
    assert torch.equal(dst, src[index])


def test_gather_rows_out_of_range_and_other_inputs_take_pytorchs_path():
    src, dst = torch.randn(3, 2, 4, 4), torch.empty(2, 2, 4, 4)
    with pytest.raises(IndexError):
        gather_rows(dst, src, torch.tensor([0, 3]))
    gather_rows(dst, src, torch.tensor([2, 1], dtype=torch.int32))  # not int64: PyTorch's index_select
    assert torch.equal(dst, src[[2, 1]])
    with native.off():
        gather_rows(dst, src, torch.tensor([1, 1]))
    assert torch.equal(dst, src[[1, 1]])


def test_a_reordered_cache_holds_its_parents_steps():
    cache = KVCache()
    steps = [torch.randn(4, 2, 1, 8) for _ in range(3)]
    for k in steps:
        cache.update(k, -k)
    first, second = torch.tensor([3, 3, 0, 1, 2]), torch.tensor([1, 0, 4, 2, 3])
    cache.reorder(first)
    cache.reorder(second)  # written into the first reorder's spare buffer
    cache.update(steps[0][:1].expand(5, -1, -1, -1), -steps[0][:1].expand(5, -1, -1, -1))  # and it grows on
    expected = torch.cat([torch.cat(steps, 2)[first][second], steps[0][:1].expand(5, -1, -1, -1)], 2)
    assert torch.equal(cache.k, expected) and torch.equal(cache.v, -expected)
