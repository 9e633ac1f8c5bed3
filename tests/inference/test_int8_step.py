"""int8's fused decoding step (`Int8DecoderStep`) gives the modules' logits bit for bit, greedy and beam states
alike, and hands every step it does not cover back to the modules."""

import pytest
import torch
from torch import nn

from attnlab.attention import KVCache, record_attention
from attnlab.attention.heads import mask_heads
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.inference import int8_step
from attnlab.inference.int8_step import Int8DecoderStep
from attnlab.inference.precision import prepare_for_inference
from attnlab.kernels import loader as native
from attnlab.models.transformer import Transformer, TransformerConfig

needs_kernels = pytest.mark.skipif(native.load("int8_step") is None, reason="no C compiler for attnlab's kernels")

V = 50


def model(precision: str = "int8", seed: int = 0, **kw) -> nn.Module:
    """A tiny random Transformer in `precision`."""
    torch.manual_seed(seed)
    args = dict(num_hiddens=64, num_heads=4, num_layers=2, ffn_num_hiddens=96) | kw
    return prepare_for_inference(Transformer(TransformerConfig(V, V, **args)).eval(), precision)


def counted(monkeypatch) -> list:
    """A list that gets an item per call of the fused step: the rows it was given."""
    calls: list = []
    original = Int8DecoderStep.__call__
    monkeypatch.setattr(Int8DecoderStep, "__call__", lambda self, *a: calls.append(len(a[0])) or original(self, *a))
    return calls


def sources(B: int = 6, S: int = 7, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (B, S), generator=g)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    return src, lens


def teacher(B: int, n: int = 6, seed: int = 2) -> torch.Tensor:
    """(B, n) random target tokens, fed one step at a time."""
    return torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(seed))


def steps(m, src, lens, n: int = 6, keep=None) -> tuple[list[torch.Tensor], type | None]:
    """Logits of n teacher-forced steps (`teacher`); after step 2 only the rows `keep` stay (sentences
    leaving the batch). Returns the logits and the type of the state's fused step."""
    out = []
    with torch.inference_mode():
        state = m.start_decoding(src, lens)
        tokens = teacher(src.shape[0], n)
        rows = torch.arange(src.shape[0])
        for t in range(n):
            logits, state = m.decode_step(tokens[rows, t : t + 1], state)
            out.append(logits.clone())
            if t == 2 and keep is not None:
                state, rows = m.reorder_state(state, keep), rows[keep]
    return out, type(state.step) if state.step is not None else None


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


CONFIGS = {
    "vector heads": {},
    "head size 8 (plain loop)": dict(num_hiddens=32, num_heads=4),
    "grouped-query": dict(num_kv_heads=2),
    "learned positions": dict(positions="learned", max_len=64),
    "no biases": dict(bias=False),
    "3 encoder blocks, 1 decoder block": dict(num_layers=3, decoder_layers=1),
}


@needs_kernels
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_int8_step_gives_the_modules_logits_bit_for_bit(config):
    m = model(**config)
    src, lens = sources()
    fused, kind = steps(m, src, lens, keep=torch.tensor([0, 2, 3, 5]))
    assert kind is Int8DecoderStep
    with int8_step.off():
        modules, kind = steps(m, src, lens, keep=torch.tensor([0, 2, 3, 5]))
    assert kind is None
    same(fused, modules)


def test_only_int8_post_norm_decoders_with_added_positions_get_the_step():
    assert steps(model("fp32"), *sources(), n=2)[1] is None
    assert steps(model("bf16"), *sources(), n=2)[1] is None
    assert steps(model(norm_first=True), *sources(), n=2)[1] is None
    assert steps(model(positions="rope"), *sources(), n=2)[1] is None


@needs_kernels
def test_off_leaves_every_step_to_the_modules():
    m = model()
    with int8_step.off():
        assert not int8_step.active() and steps(m, *sources(), n=2)[1] is None
    assert int8_step.active() and steps(m, *sources(), n=2)[1] is Int8DecoderStep


@needs_kernels
def test_int8_step_runs_every_step_the_first_included(monkeypatch):
    calls = counted(monkeypatch)
    steps(model(), *sources(), n=4)
    assert len(calls) == 4


@needs_kernels
def test_the_step_takes_over_caches_the_modules_filled():
    m = model()
    src, lens = sources()
    tokens = teacher(6, 4)
    with int8_step.off():
        reference, _ = steps(m, src, lens, n=4)
    with torch.inference_mode():
        state = m.start_decoding(src, lens)
        handle = m.decoder.blocks[0].register_forward_hook(lambda mod, i, o: None)
        first = m.decode_step(tokens[:, :1], state)[0].clone()  # the modules: the hook watches
        handle.remove()
        rest = [m.decode_step(tokens[:, t : t + 1], state)[0].clone() for t in range(1, 4)]
    same([first, *rest], reference)


@needs_kernels
def test_tokens_the_kernel_cannot_read_go_to_the_modules(monkeypatch):
    m = model()
    calls = counted(monkeypatch)
    with torch.inference_mode():
        state = m.start_decoding(*sources())
        int32 = m.decode_step(torch.ones((6, 1), dtype=torch.int32), state)[0]
    with int8_step.off(), torch.inference_mode():
        state = m.start_decoding(*sources())
        same([int32], [m.decode_step(torch.ones((6, 1), dtype=torch.int64), state)[0]])
    assert calls == [6]  # called, and it handed the step back


@needs_kernels
@pytest.mark.parametrize("where", ["source", "target"])
def test_non_finite_inputs_give_the_modules_nan_rows(where):
    m = model()
    src, lens = sources()
    with torch.no_grad():  # one word's embedding NaN: the rows that read it, and only they, turn NaN
        stack = m.encoder if where == "source" else m.decoder
        stack.embedding.weight[src[1, 0] if where == "source" else teacher(6)[1, 2]] = float("nan")
    fused, _ = steps(m, src, lens)
    assert any(torch.isnan(x).any() for x in fused) and not all(torch.isnan(x).all() for x in fused)
    with int8_step.off():
        same(fused, steps(m, src, lens)[0])


@needs_kernels
def test_a_token_outside_the_vocabulary_is_the_modules_error():
    m = model()
    with torch.inference_mode():
        state = m.start_decoding(*sources())
        m.decode_step(torch.full((6, 1), 1), state)
        with pytest.raises(IndexError):
            m.decode_step(torch.full((6, 1), V + 3), state)


@needs_kernels
def test_recording_hooks_and_head_masks_take_the_modules_path(monkeypatch):
    m = model()
    src, lens = sources()
    calls = counted(monkeypatch)
    with record_attention(m) as rec:
        steps(m, src, lens, n=3)
    assert calls == [] and len(rec.weights["decoder.blocks.0.self_attention"]) == 3
    handle = m.decoder.blocks[0].ffn.register_forward_hook(lambda mod, i, o: None)
    steps(m, src, lens, n=3)
    handle.remove()
    with mask_heads(m, {"decoder.blocks.0.self_attention": [1, 0, 1, 1]}):
        steps(m, src, lens, n=3)
    assert calls == []
    steps(m, src, lens, n=3)
    assert len(calls) == 3  # nothing in the way again: the fused step is back


@needs_kernels
def test_int8_fused_key_value_layer_is_the_two_layers_exactly():
    m = model()
    cross = m.decoder.blocks[0].cross_attention
    x = torch.randn(5, 7, 64)
    with torch.inference_mode():
        torch.testing.assert_close(cross.W_kv(x), torch.cat([cross.W_k(x), cross.W_v(x)], -1), rtol=0, atol=0)


def test_kv_cache_next_slot_starts_grows_and_keeps_the_steps():
    cache = KVCache()
    cache.reserve(2)
    steps_written = []
    for t in range(KVCache.min_capacity + 3):  # past the first buffer: it grows, keeping what it held
        kbuf, vbuf, at = cache.next_slot(2, 3, 4)
        assert at == t and kbuf.shape[:2] == (2, 3) and kbuf.shape[2] > t
        k = torch.full((2, 3, 4), float(t))
        kbuf[:, :, at], vbuf[:, :, at] = k, -k
        steps_written.append(k)
        cache.advance(finite=t != 5)
    assert len(cache) == KVCache.min_capacity + 3 and not cache.finite
    assert torch.equal(cache.k, torch.stack(steps_written, 2)) and torch.equal(cache.v, -cache.k)


def beam_steps(m, src, lens, K: int, n: int = 7, seed: int = 3, watched=()) -> tuple[list[torch.Tensor], list[int]]:
    """Logits of n teacher-forced steps of a beam state, driven as beam search drives it: step 0 on the B
    sources, `expand_beams` (sources 1 and 4 gone: they finished at once), then each step every hypothesis
    takes a random parent of its sentence (`reorder_state(same_sources=True)`); after step 3 sentence 0 and
    the last leave the batch, after step 5 every hypothesis takes a parent of any sentence (the state drops
    to one row per hypothesis). At the steps in `watched` a forward hook makes the modules take the step.
    Returns the logits and the beam of the state at each step."""
    g = torch.Generator().manual_seed(seed)
    out, beams = [], []
    with torch.inference_mode():
        state = m.start_decoding(src, lens)
        inp = teacher(src.shape[0], 1, seed)
        for t in range(n):
            hook = m.decoder.blocks[0].register_forward_hook(lambda *a: None) if t in watched else None
            logits, state = m.decode_step(inp, state)
            if hook is not None:
                hook.remove()
            out.append(logits.clone())
            beams.append(state.beam)
            if t == 0:
                state = m.expand_beams(state, torch.tensor([0, 2, 3, 5]), K)
            else:
                B = state.rows // state.beam
                parents = torch.randint(0, state.beam, (B, state.beam), generator=g)
                rows = (torch.arange(B)[:, None] * state.beam + parents).reshape(-1)
                if t == 3:  # the first and the last sentence leave: their groups of rows go
                    rows = rows.view(B, state.beam)[1:-1].reshape(-1)
                    state = m.reorder_state(state, rows)
                elif t == 5:
                    state = m.reorder_state(state, torch.randint(0, state.rows, (state.rows,), generator=g))
                else:
                    state = m.reorder_state(state, rows, same_sources=True)
            inp = torch.randint(0, V, (state.rows, 1), generator=g)
    return out, beams


@needs_kernels
@pytest.mark.parametrize("K", [2, 4])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_int8_step_gives_the_modules_logits_bit_for_bit_on_beams(config, K, monkeypatch):
    m = model(**config)
    src, lens = sources()
    calls = counted(monkeypatch)
    fused, beams = beam_steps(m, src, lens, K)
    assert len(calls) == len(fused)  # every step fused, the first, the folded and the unfolded ones
    assert beams == [1, K, K, K, K, K, 1]
    with int8_step.off():
        modules, _ = beam_steps(m, src, lens, K)
    assert len(calls) == len(fused)
    same(fused, modules)


@needs_kernels
def test_the_modules_take_over_a_beam_state_the_int8_step_left_reordered(monkeypatch):
    """Reorders kept as an index (`TransformerState.ancestry`) are laid out again for the modules' steps."""
    m = model(num_kv_heads=2)
    src, lens = sources()
    calls = counted(monkeypatch)
    fused, _ = beam_steps(m, src, lens, 4, watched=(2, 5))
    assert len(calls) == len(fused) - 2
    with int8_step.off():
        same(fused, beam_steps(m, src, lens, 4)[0])


@needs_kernels
@pytest.mark.parametrize("K", [1, 2, 4])
def test_beam_search_on_the_int8_step_finds_the_modules_hypotheses(K, monkeypatch):
    """Every step of greedy, beam and n-best search on the fused step, the hypotheses the modules find."""
    m = model(num_kv_heads=2)
    with torch.no_grad():
        m.decoder.dense.bias[2] += 1.0  # <eos> likely enough that hypotheses finish along the way
    src, lens = sources(B=8)
    rows = counted(monkeypatch)
    # Limits of source length + 4: sentences finish or reach theirs at different steps and leave the batch.
    best = DecodeOptions(beam=K, early_stopping=True)
    limits = (lens + 4).tolist()
    fused = [hs[0] for hs in generate(m, src, lens, best, bos=1, eos=2, max_len=limits)]
    assert rows[:2] == [8, 8 * K] and rows[-1] < rows[2] and len(rows) == 9  # every step fused, rows leaving
    assert any(h.finished for h in fused) and not all(h.finished for h in fused)
    every = DecodeOptions(beam=K, n_best=K, early_stopping=True)
    nbest = generate(m, src, lens, every, bos=1, eos=2, max_len=9)
    with int8_step.off():
        assert [hs[0] for hs in generate(m, src, lens, best, bos=1, eos=2, max_len=limits)] == fused
        assert generate(m, src, lens, every, bos=1, eos=2, max_len=9) == nbest
