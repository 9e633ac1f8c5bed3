"""Translator and encode_source without the corpus: a tiny model and vocabularies built here.

Covers: learned positions never crash decoding, and weights are checked against the config before
anything big is allocated (a config edited after training is refused)."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.analysis.explanation import check_text, explain
from attnlab.data import Vocab
from attnlab.decoding.translator import InputError, TextTooLong, Translator, encode_source
from attnlab.models import Transformer, TransformerConfig
from attnlab.runs.checkpoints import save_tensors
from attnlab.runs.config import write_run_config
from attnlab.runs.layout import WEIGHTS_FILE
from attnlab.runs.loading import load_translator
from attnlab.runs.weights import CONFIG_METADATA, load_weights, read_header, save_weights

pytestmark = pytest.mark.usefixtures("one_thread")

EN = [["i'm", "home", "."], ["go", "."], ["he's", "calm", "."], ["i", "lost", "."]]
FR = [["je", "suis", "chez", "moi", "."], ["va", "!"], ["il", "est", "calme", "."], ["j'ai", "perdu", "."]]


def tiny(positions="sinusoidal", max_len=64, **kw):
    src, tgt = Vocab(EN, min_freq=1), Vocab(FR, min_freq=1)
    torch.manual_seed(0)
    cfg = TransformerConfig(
        len(src),
        len(tgt),
        num_hiddens=8,
        num_heads=2,
        num_layers=1,
        ffn_num_hiddens=16,
        dropout=0.0,
        max_len=max_len,
        positions=positions,
        **kw,
    )
    return Transformer(cfg), src, tgt


def write_run(tmp_path, model, src, tgt):
    write_run_config(tmp_path, "transformer", model.config.to_dict(), {}, {}, src_vocab=src, tgt_vocab=tgt)
    save_weights(model, tmp_path / WEIGHTS_FILE)
    return tmp_path


def edit_config(run_dir, **changes):
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["model"].update(changes)
    (run_dir / "config.json").write_text(json.dumps(cfg))


def test_encode_source_is_the_one_check():
    _, src, _ = tiny()
    assert encode_source(src, "i'm home .") == src.encode("i'm home .")
    for bad in ("", "   ", None, 3):
        with pytest.raises(InputError):
            encode_source(src, bad)
    with pytest.raises(TextTooLong):
        encode_source(src, "go " * 10, max_chars=5)
    with pytest.raises(InputError, match="max_len"):
        encode_source(src, "go go go go .", max_len=4)
    with pytest.warns(UserWarning, match="truncating"):
        assert len(encode_source(src, "go go go go .", max_len=4, truncate=True)) == 3
    model, src, tgt = tiny()
    t = Translator(model, src, tgt, max_len=4)
    # explain's check and the translator's refuse the same text with the same message
    with pytest.raises(InputError) as a:
        check_text(t, "go go go go .")
    with pytest.raises(InputError) as b:
        t.translate(["go go go go ."])
    assert str(a.value) == str(b.value)
    with pytest.raises(InputError, match="list"):
        t.translate("go .")


def test_learned_positions_cap_the_output_and_never_fail_the_batch():
    """A 6-row learned position table; 2S+10 would ask for 22 decoder positions."""
    model, src, tgt = tiny(positions="learned", max_len=6)
    t = Translator(model, src, tgt, max_len=6)
    assert t.output_limit(6) == 6 and t.output_limit(1) == 6
    batch = ["i'm home . go .", "go ."]  # 5 tokens + <eos> = the whole table
    for beam in (1, 3):
        hyps = [hs[0] for hs in t.search(t.encode(batch), t.options(beam=beam))]
        assert all(len(h.tokens) <= 6 for h in hyps)
        assert len(t.translate(batch, options=t.options(beam=beam))) == 2
    exp = explain(t, "i'm home . go .")
    assert exp.cross.shape[2] == len(exp.tgt_tokens) <= 6


def test_sinusoidal_positions_keep_the_usual_limit():
    model, src, tgt = tiny()
    assert Translator(model, src, tgt).output_limit(6) == 22


def test_explanation_kinds_come_from_the_model():
    model, src, tgt = tiny()
    exp = explain(Translator(model, src, tgt), "he's calm .")
    assert exp.model_type == "transformer" and list(exp.maps) == ["encoder_self", "decoder_self", "cross"]
    ((hyp,),) = Translator(model, src, tgt).search([src.encode("he's calm .")])
    assert exp.finished == hyp.finished
    assert len(exp.tgt_tokens) == len(hyp.tokens) + hyp.finished


def test_load_translator_round_trip_and_metadata(tmp_path):
    model, src, tgt = tiny()
    run = write_run(tmp_path, model, src, tgt)
    _, meta = read_header(run / WEIGHTS_FILE)
    assert json.loads(meta[CONFIG_METADATA])["num_heads"] == 2
    t = load_translator(run)
    assert t.translate(["go ."]) == Translator(model, src, tgt).translate(["go ."])


def test_edited_num_heads_is_refused(tmp_path):
    """Same tensor shapes, different computation: only the saved metadata can tell."""
    run = write_run(tmp_path, *tiny())
    edit_config(run, num_heads=4)
    with pytest.raises(ValueError, match=r"num_heads=4 .* saved with num_heads=2"):
        load_translator(run)


def test_older_weights_without_metadata_still_load(tmp_path):
    model, src, tgt = tiny()
    run = write_run(tmp_path, model, src, tgt)
    save_tensors(model.state_dict(), run / "plain.safetensors")  # no attnlab metadata
    t = load_translator(run, weights=run / "plain.safetensors")
    assert t.translate(["go ."]) == Translator(model, src, tgt).translate(["go ."])


def test_crafted_config_is_refused_before_allocating(tmp_path, monkeypatch):
    """ffn_num_hiddens=6000000 would allocate ~0.8 GB here: the model is built on the meta device and
    compared with the weights' header first, so no real model is ever built."""
    from attnlab.runs import loading

    run = write_run(tmp_path, *tiny())
    edit_config(run, ffn_num_hiddens=6_000_000)
    devices = []
    real = loading.build_model

    def spy(*a, **kw):
        devices.append(torch.empty(0).device.type)  # the default device the model is built on
        return real(*a, **kw)

    monkeypatch.setattr(loading, "build_model", spy)
    with pytest.raises(ValueError, match=r"ffn.dense1.weight has shape \(16, 8\) but the model expects \(6000000, 8\)"):
        load_translator(run)
    assert devices == ["meta"]


def test_a_small_model_is_built_once_on_the_cpu_and_still_checked(tmp_path, monkeypatch):
    """Below SKELETON_BYTES no meta-device skeleton (PyTorch's factories there import torch._dynamo on first use:
    a second of every command's start): the model is built once, and its weights are checked all the same."""
    from attnlab.runs import loading

    run = write_run(tmp_path, *tiny())
    devices = []
    real = loading.build_model

    def spy(*a, **kw):
        devices.append(torch.empty(0).device.type)
        return real(*a, **kw)

    monkeypatch.setattr(loading, "build_model", spy)
    load_translator(run)
    assert devices == ["cpu"]
    edit_config(run, ffn_num_hiddens=24)
    with pytest.raises(ValueError, match=r"ffn.dense1.weight has shape \(16, 8\) but the model expects \(24, 8\)"):
        load_translator(run)


def test_missing_and_unexpected_tensors_are_one_clear_error(tmp_path):
    model, src, tgt = tiny()
    run = write_run(tmp_path, model, src, tgt)
    weights = dict(model.state_dict())
    weights.pop("decoder.dense.bias")
    weights["decoder.extra"] = torch.zeros(2)
    save_tensors(weights, run / "odd.safetensors")
    with pytest.raises(ValueError, match=r"missing tensors: decoder.dense.bias.*unexpected tensors: decoder.extra"):
        load_translator(run, weights=run / "odd.safetensors")
    # load_weights itself (the resume path) says the same, never a TypeError
    with pytest.raises(ValueError, match="missing tensors"):
        load_weights(model, run / "odd.safetensors")
    (run / "junk.safetensors").write_bytes(b"not safetensors at all")
    with pytest.raises(ValueError, match="not a readable safetensors"):
        load_translator(run, weights=run / "junk.safetensors")


def test_translate_tokens_takes_the_ids_encode_gave():
    model, src, tgt = tiny()
    translator = Translator(model, src, tgt)
    texts = ["i'm home .", "go ."]
    opts = translator.options(beam=2)
    ids = translator.encode(texts)
    plain = translator.translate_tokens(texts, options=opts)
    given = translator.translate_tokens(texts, options=opts, src_ids=ids)
    assert [(t.src_tokens, t.tgt_tokens) for t in given] == [(t.src_tokens, t.tgt_tokens) for t in plain]
    # the ids are the sentences' own: one list each
    with pytest.raises(ValueError, match="one id list per sentence: 1 for 2"):
        translator.translate_tokens(texts, src_ids=ids[:1])


def test_search_texts_are_each_hypothesis_detokenized_where_it_was_decoded():
    """`texts=True`: each batch's hypotheses come back with their text (the worker that decoded them wrote it),
    the target vocabulary's decode of their tokens; without it, none (the callers that want ids pay nothing)."""
    model, src, tgt = tiny()
    torch.manual_seed(1)
    with torch.no_grad():  # weights that say words, not only <eos>
        for p in model.parameters():
            p.normal_(0, 1)
    translator = Translator(model, src, tgt)
    ids = translator.encode(["i'm home .", "go .", "he's calm ."])
    opts = translator.options(beam=2, n_best=2)
    found = translator.search(ids, opts, batch_size=1, workers=2, texts=True)
    assert [len(hs) for hs in found] == [2, 2, 2]
    assert all(h.text == tgt.decode(h.tokens) for hs in found for h in hs)
    assert any(h.text and h.text != h.text.replace(" ", "") for hs in found for h in hs)  # words, spaced
    assert all(h.text is None for hs in translator.search(ids, opts, batch_size=1) for h in hs)


def test_search_runs_without_the_cyclic_collector(monkeypatch):
    """From the per-sentence targets to the last hypothesis, `search` keeps the collector paused: a full collection
    that its thousands of lists set off would walk every object the model and torch keep, and find no cycle."""
    import gc

    import attnlab.decoding.translator as module

    seen = {}

    def spy(name, fn):
        def call(*args, **kwargs):
            seen[name] = gc.isenabled()
            return fn(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    spy("target_ids", module.target_ids)
    spy("search_batches", module.search_batches)
    model, src, tgt = tiny()
    translator = Translator(model, src, tgt)
    assert gc.isenabled()
    translator.search(translator.encode(["i'm home .", "go ."]), translator.options(beam=2))
    assert seen == {"target_ids": False, "search_batches": False}
    assert gc.isenabled()  # and on again after


def test_long_inputs_of_one_row_per_sentence_take_the_larger_batches(monkeypatch):
    """The precision's smaller batches (int8: 96) on a short input or for several samples a sentence; else as
    many sentences as give every worker LONG_INPUT_BATCHES batches (in steps of 32), up to DEFAULT_BATCH_SIZE
    and BEAM_ROWS rows (beam 4: 192; beam 8: the precision's 96); a batch size asked for, as asked."""
    import attnlab.decoding.translator as module

    sizes = []

    def spy(job, src_ids, options, prefixes, constraints, *, batch_size, workers, texts):
        sizes.append(batch_size)
        return [[module.Hypothesis([], 0.0, True, [])] for _ in src_ids]

    monkeypatch.setattr(module, "search_batches", spy)
    model, src, tgt = tiny()
    translator = Translator(model, src, tgt)
    translator.batch_size = 96
    long = module.DEFAULT_BATCH_SIZE * module.LONG_INPUT_BATCHES * 2
    ids = [[4, 5]] * long
    greedy, beam = translator.options(beam=1), translator.options(beam=2)
    sample, samples = translator.options(sample=True, seed=0), translator.options(sample=True, n_best=2, seed=0)
    translator.search(ids, greedy, workers=2)  # 256 a batch, 4 batches a worker
    translator.search(ids * 3, greedy, workers=2)  # never above 256
    translator.search(ids[:1558], greedy, workers=2)  # 1,558 // 8 = 194: 192
    translator.search(ids[:700], greedy, workers=2)  # 87: the precision's 96
    translator.search(ids, greedy, workers=3)  # 2,048 // 12 = 170: 160
    translator.search(ids, sample, workers=2)
    translator.search(ids, samples, workers=2)  # two rows per sentence
    translator.search(ids, beam, workers=2)  # 2 rows a sentence: 256
    translator.search(ids, translator.options(beam=4), workers=2)  # 768 // 4 = 192
    translator.search(ids[:1000], translator.options(beam=4), workers=2)  # 1,000 // 8 = 125: 96
    translator.search(ids, translator.options(beam=8), workers=2)  # 768 // 8 = 96
    translator.search(ids, greedy, workers=2, batch_size=64)
    assert sizes == [256, 256, 192, 96, 160, 256, 96, 256, 192, 96, 96, 64]
    translator.batch_size = 256  # fp32's: as it is
    translator.search(ids[:700], greedy, workers=2)
    assert sizes[-1] == 256
