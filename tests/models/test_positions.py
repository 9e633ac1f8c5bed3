"""Every position scheme and grouped-query attention in the Transformer: fused == recorded, cached
decoding == full forward (past the training length too), beam search, local attention, head masks,
pruning, saving and loading, and the config's one-line errors."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import mask_heads, record_attention
from attnlab.attention.positions import POSITIONS
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.models import Transformer, TransformerConfig, build_model

SCHEMES = [(p, kv) for p in POSITIONS for kv in (None, 2)] + [("rope", 1), ("t5", 1)]


def beam_search(model, src, lens, bos, eos, beam=4, max_len=50, length_penalty=1.0):
    """The generator's beam search: the best hypothesis per source."""
    opts = DecodeOptions(beam=beam, length_penalty=length_penalty)
    return [hs[0] for hs in generate(model, src, lens, opts, bos=bos, eos=eos, max_len=max_len)]


def tiny(positions="sinusoidal", num_kv_heads=None, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        src_vocab_size=13,
        tgt_vocab_size=11,
        num_hiddens=16,
        num_heads=4,
        num_layers=2,
        ffn_num_hiddens=32,
        dropout=0.0,
        max_len=8,
        positions=positions,
        num_kv_heads=num_kv_heads,
        **kw,
    )
    model = Transformer(cfg).eval()
    with torch.no_grad():  # T5's table starts at zero: give it something to show
        for m in model.modules():
            if hasattr(m, "num_buckets"):
                torch.nn.init.normal_(m.embedding.weight)
    return model


def batch(T=6):
    g = torch.Generator().manual_seed(1)
    return torch.randint(3, 13, (2, 5), generator=g), torch.randint(3, 11, (2, T), generator=g), torch.tensor([5, 3])


@pytest.mark.parametrize(("positions", "kv"), SCHEMES)
def test_fused_equals_recorded(positions, kv):
    model = tiny(positions, kv)
    src, tgt, lens = batch()
    fused = model(src, tgt, lens)
    with record_attention(model) as rec:
        recorded = model(src, tgt, lens)
    torch.testing.assert_close(fused, recorded, atol=1e-5, rtol=1e-5)
    assert rec.weights["decoder.blocks.1.self_attention"][0].shape == (2, 4, 6, 6)


@pytest.mark.parametrize(("positions", "kv"), SCHEMES)
def test_cached_decoding_equals_full_forward_past_the_training_length(positions, kv):
    model = tiny(positions, kv)
    T = 8 if positions == "learned" else 12  # learned: max_len rows; the others run past max_len = 8
    src, tgt, lens = batch(T)
    full = model(src, tgt, lens)
    state = model.start_decoding(src, lens)
    steps = [model.decode_step(tgt[:, t : t + 1], state)[0] for t in range(T)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    heads = model.config.num_kv_heads or 4
    assert state.caches[0][0].k.shape == (2, heads, T, 4)  # the cache holds only the KV heads
    assert state.caches[0][1].k.shape == (2, heads, 5, 4)


def test_positions_change_what_the_model_computes():
    src, tgt, lens = batch()
    outs = {p: tiny(p)(src, tgt, lens) for p in POSITIONS}
    for p in POSITIONS[1:]:
        assert not torch.allclose(outs[p], outs["sinusoidal"]), p
    # without positions the encoder is blind to order: permuting the source permutes its memory
    model = tiny("none")
    perm = torch.tensor([4, 2, 0, 1, 3])
    mem = model.encoder(src)
    torch.testing.assert_close(model.encoder(src[:, perm]), mem[:, perm], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("positions", "kv"), [("rope", 2), ("alibi", None), ("t5", 1), ("none", None)])
def test_beam_search_scores_are_the_models_log_probabilities(positions, kv):
    model = tiny(positions, kv)
    src, _, lens = batch()
    hyps = beam_search(model, src, lens, bos=1, eos=2, beam=3, max_len=10)
    for i, h in enumerate(hyps):
        tokens = torch.tensor([[1, *h.tokens, 2][: len(h.positional_scores) + 1]])
        logp = F.log_softmax(model(src[i : i + 1, : int(lens[i])], tokens[:, :-1]), dim=-1)
        want = logp[0].gather(-1, tokens[0, 1:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(h.positional_scores), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("positions", ["rope", "alibi", "t5"])
def test_local_attention_blockwise_equals_dense(positions):
    model = tiny(positions, window=2)
    src = torch.randint(3, 13, (2, 40))
    lens = torch.tensor([40, 29])
    dense = model.encoder(src, lens)
    for block in model.encoder.blocks:
        block.attention.block_size = 4  # 40 > 2 * 4: the blockwise path
    torch.testing.assert_close(model.encoder(src, lens), dense, atol=1e-5, rtol=1e-5)
    with record_attention(model.encoder) as rec:
        recorded = model.encoder(src, lens)
    torch.testing.assert_close(recorded, dense, atol=1e-5, rtol=1e-5)
    assert bool((rec.weights["blocks.0.attention"][0][0, :, 10, 13:] == 0).all())  # outside the window


@pytest.mark.parametrize(("positions", "kv"), [("alibi", None), ("t5", None), ("t5", 2), ("rope", 2)])
def test_head_masks_and_pruning_agree(positions, kv):
    model = tiny(positions, kv)
    src, tgt, lens = batch()
    name = "decoder.blocks.0.self_attention"
    with mask_heads(model, {name: [0, 0, 1, 1]}):
        masked = model(src, tgt, lens)
    model.prune_heads({name: [0, 1]})
    # the bias of the heads left is cut to them (ALiBi's slopes and T5's columns 2 and 3)
    assert model.decoder.blocks[0].self_attention.kept_heads == [2, 3]
    torch.testing.assert_close(model(src, tgt, lens), masked, atol=1e-5, rtol=1e-5)
    reloaded = build_model("transformer", model.config.to_dict())
    reloaded.load_state_dict(model.state_dict())
    torch.testing.assert_close(reloaded.eval()(src, tgt, lens), masked, atol=1e-5, rtol=1e-5)


def test_pruning_part_of_a_kv_group_is_refused_in_one_line():
    model = tiny("rope", 2)
    with pytest.raises(ValueError, match="whole groups of 2"):
        model.prune_heads({"encoder.blocks.0.attention": [0]})


def test_config_round_trip_and_unknown_position_fields():
    for p in POSITIONS:
        cfg = tiny(p, 2).config
        assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    assert TransformerConfig.from_dict({"src_vocab_size": 5, "tgt_vocab_size": 5}).positions == "sinusoidal"
    flat = {"src_vocab_size": 5, "tgt_vocab_size": 5, "positions": "rope", "rope_base": 500.0}  # no such field
    with pytest.raises(ValueError, match=r"unknown TransformerConfig keys \['rope_base'\]"):
        TransformerConfig.from_dict(flat)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"positions": "xpos"}, "positions must be one of"),
        ({"num_kv_heads": 3}, "num_kv_heads must divide"),
        ({"num_kv_heads": 0}, "num_kv_heads must divide"),
        ({"positions": "rope", "position_options": {"fraction": 0.0}}, "rope needs"),
        ({"positions": "t5", "position_options": {"max_distance": 8}}, "t5 needs"),
        ({"positions": "rope", "position_options": {"layout": "split"}}, "takes the options"),
        ({"positions": "sinusoidal", "position_options": {"layout": "diagonal"}}, "takes layout"),
        ({"positions": "rope", "position_options": {"base": "big"}}, "RopeOptions.base must be"),
    ],
)
def test_bad_configs_are_one_line(kw, message):
    with pytest.raises(ValueError, match=message) as err:
        TransformerConfig(5, 5, num_hiddens=16, num_heads=4, **kw)
    assert "\n" not in str(err.value)


def test_kv_cache_bytes():
    cfg = TransformerConfig(5, 5, num_hiddens=512, num_heads=8, num_layers=6, num_kv_heads=2)
    assert cfg.kv_cache_bytes(1) == 2 * 6 * 2 * 64 * 4
    assert cfg.kv_cache_bytes(10, 7, bytes_per_value=2) == 17 * 2 * 6 * 2 * 64 * 2
