"""The benchmark baselines compute the same function as attnlab's Transformer (so a speed ratio
compares implementations, not architectures): the book's formulation and the nn.Transformer wrapper,
each with attnlab's weights copied in, give attnlab's logits."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCH / "training"), str(BENCH / "decoding"), str(BENCH)]

from baselines.d2l_transformer import from_attnlab_config, load_attnlab_weights  # noqa: E402
from train_throughput import TorchTransformer, make_batches, plain_dropout  # noqa: E402

from attnlab.attention.dropout import Dropout  # noqa: E402
from attnlab.models import Transformer, TransformerConfig  # noqa: E402


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


def beam_search(model, src, lens, bos, eos, beam=4, max_len=50, length_penalty=1.0):
    """The generator's beam search: the best hypothesis per source."""
    opts = DecodeOptions(beam=beam, length_penalty=length_penalty)
    return [hs[0] for hs in generate(model, src, lens, opts, bos=bos, eos=eos, max_len=max_len)]


@pytest.fixture
def ours():
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=50, tgt_vocab_size=40, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64, dropout=0.0
    )
    return Transformer(config).train()


def _batch():
    src, src_lens, tgt_in, _, _ = make_batches(1, 4, 2, 7, 40, 40, seed=1)[0]
    return src, tgt_in, src_lens


def _copy_into_torch(model: TorchTransformer, ours: Transformer) -> None:
    def attn(dst, src):
        dst.in_proj_weight.copy_(torch.cat([src.W_q.weight, src.W_k.weight, src.W_v.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.W_q.bias, src.W_k.bias, src.W_v.bias]))
        dst.out_proj.load_state_dict(src.W_o.state_dict())

    def ffn_norms(dst, blk, norms):
        dst.linear1.load_state_dict(blk.ffn.dense1.state_dict())
        dst.linear2.load_state_dict(blk.ffn.dense2.state_dict())
        for i, name in enumerate(norms, start=1):
            getattr(dst, f"norm{i}").load_state_dict(getattr(blk, name).ln.state_dict())

    with torch.no_grad():
        model.src_emb.load_state_dict(ours.encoder.embedding.state_dict())
        model.tgt_emb.load_state_dict(ours.decoder.embedding.state_dict())
        model.out.load_state_dict(ours.decoder.dense.state_dict())
        for dst, blk in zip(model.core.encoder.layers, ours.encoder.blocks):
            attn(dst.self_attn, blk.attention)
            ffn_norms(dst, blk, ["addnorm1", "addnorm2"])
        for dst, blk in zip(model.core.decoder.layers, ours.decoder.blocks):
            attn(dst.self_attn, blk.self_attention)
            attn(dst.multihead_attn, blk.cross_attention)
            ffn_norms(dst, blk, ["addnorm1", "addnorm2", "addnorm3"])


def test_book_transformer_matches_attnlab(ours):
    book = from_attnlab_config(ours.config).train()
    load_attnlab_weights(book, ours)
    src, tgt_in, lens = _batch()
    assert lens.min() < lens.max()  # padding is exercised
    torch.testing.assert_close(book(src, tgt_in, lens), ours(src, tgt_in, lens), atol=1e-5, rtol=1e-5)


def test_book_transformer_is_causal_through_valid_lens(ours):
    book = from_attnlab_config(ours.config).train()
    src, tgt_in, lens = _batch()
    changed = tgt_in.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 40
    torch.testing.assert_close(book(src, changed, lens)[:, :-1], book(src, tgt_in, lens)[:, :-1])


def test_nn_transformer_wrapper_matches_attnlab(ours):
    model = TorchTransformer(ours.config).train()
    _copy_into_torch(model, ours)
    src, tgt_in, lens = _batch()
    torch.testing.assert_close(model(src, tgt_in, lens), ours(src, tgt_in, lens), atol=1e-5, rtol=1e-5)


def test_book_baseline_rejects_configs_it_cannot_express(ours):
    with pytest.raises(ValueError, match="post-norm"):
        from_attnlab_config(
            TransformerConfig(
                src_vocab_size=5,
                tgt_vocab_size=5,
                num_hiddens=8,
                num_heads=2,
                num_layers=1,
                ffn_num_hiddens=8,
                norm_first=True,
            )
        )


def test_decode_floor_replays_every_matmul_and_attention_kernel_of_beam_search():
    """benchmarks/decoding/decode.py's floors replay exactly the kernels beam search ran, with their shapes."""
    import decode as decode_bench

    torch.manual_seed(0)
    cfg = TransformerConfig(30, 30, num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=32, dropout=0.0)
    model = Transformer(cfg)
    src, lens = torch.randint(3, 30, (3, 5)), torch.tensor([5, 4, 2])

    def beam():
        return beam_search(model, src, lens, 1, -1, beam=2, max_len=4)

    cpu = torch.device("cpu")
    replay, n_mm = decode_bench.kernel_floor(beam, decode_bench.MATMULS, cpu)
    with decode_bench._Kernels(decode_bench.MATMULS) as rec:
        replay()
    assert n_mm == len(rec.calls) > 0
    before = torch.get_num_threads()
    replay(2)  # dealt over two worker threads of one intra-op thread each (ct2_speed.py --floors, w2 engines)
    assert torch.get_num_threads() == before
    # 2 layers x (fused QKV, W_o, cross W_q, cross W_o, 2 FFN) + 1 output layer per step, and the
    # encoder's and cross K/V's once: at least 4 steps' worth
    assert n_mm >= 4 * (2 * 6 + 1)
    _, n_both = decode_bench.kernel_floor(beam, decode_bench.MATMULS | decode_bench.ATTENTION, cpu)
    assert n_both > n_mm  # the attention kernels were captured too
    # greedy runs under torch.inference_mode, where linear and SDPA arrive whole: captured all the same
    _, n_greedy = decode_bench.kernel_floor(
        lambda: greedy(model, src, lens, 1, -1, 4), decode_bench.MATMULS | decode_bench.ATTENTION, cpu
    )
    assert n_greedy >= 4 * (2 * (6 + 2) + 1)


def test_plain_dropout_swaps_every_attnlab_dropout():
    """train_throughput.py --plain-dropout: the same model with nn.Dropout layers (same p), nothing else."""
    torch.manual_seed(0)
    config = TransformerConfig(50, 40, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64, dropout=0.1)
    ours = Transformer(config)
    ps = [m.p for m in ours.modules() if isinstance(m, Dropout)]
    plain = plain_dropout(Transformer(config))
    assert ps and not any(isinstance(m, Dropout) for m in plain.modules())
    assert [m.p for m in plain.modules() if type(m) is torch.nn.Dropout] == ps
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in ours.named_parameters()]
