"""Exports of pruned runs (`attnlab heads --prune`), one module with every head removed: Marian and
CTranslate2 take one head count per model, so pruned heads are exported as zeros, which compute the same;
and the CTranslate2 export of an imported Marian model (swish, its embedding scale, <pad> never emitted)."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis import save_pruned_run
from attnlab.cli import main
from attnlab.export.pruning import restore_pruned_heads
from attnlab.runs.loading import load_translator

from .conftest import sentences
from .marian.test_marian_roundtrip import TEXTS, _batch, _generate

pytestmark = pytest.mark.usefixtures("one_thread")
HEADS = {
    "encoder.blocks.0.attention": [1, 2],
    "decoder.blocks.0.self_attention": [0, 1, 2, 3],  # every head of the module
    "decoder.blocks.1.cross_attention": [3],
}


@pytest.fixture(scope="module")
def runs(marian_dir, tmp_path_factory):
    from attnlab.export.marian import import_hf

    root = tmp_path_factory.mktemp("pruned")
    run = import_hf(marian_dir, root / "opus")
    save_pruned_run(run, HEADS, root / "pruned")
    return run, root / "pruned"


def test_restored_model_computes_what_the_pruned_one_does(runs):
    pruned = load_translator(runs[1], precision="fp32").model
    assert pruned.decoder.blocks[0].self_attention.num_heads == 0
    full = restore_pruned_heads(pruned)
    assert full.config.pruned_heads is None and full.decoder.blocks[0].self_attention.num_heads == 4
    tr = load_translator(runs[1], precision="fp32")
    src, lens = _batch(tr, TEXTS)
    tgt = torch.randint(0, len(tr.tgt_vocab) - 1, (len(TEXTS), 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(full(src, tgt, lens), pruned(src, tgt, lens), atol=1e-6, rtol=0)


def test_hf_export_of_a_pruned_run_decodes_as_attnlab(runs, tmp_path):
    from transformers import MarianMTModel, MarianTokenizer

    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(runs[1]), "--format", "hf", "--out", str(out)]) == 0
    hf = MarianMTModel.from_pretrained(out).eval(), MarianTokenizer.from_pretrained(out)
    tr = load_translator(runs[1], precision="fp32")
    src, lens = _batch(tr, TEXTS)
    tgt = torch.full((len(TEXTS), 1), hf[0].config.decoder_start_token_id)
    with torch.no_grad():
        want = tr.model(src, tgt, lens)
        got = hf[0](input_ids=src, attention_mask=(src != tr.src_vocab.pad).long(), decoder_input_ids=tgt).logits
    keep = [i for i in range(want.shape[-1]) if i not in tr.model.config.suppress_tokens]
    torch.testing.assert_close(got[..., keep], want[..., keep], atol=1e-4, rtol=1e-4)
    texts = TEXTS + sentences(8, seed=3)
    assert [
        hs[0].tokens for hs in tr.search([tr.src_vocab.encode(t) for t in texts], tr.options(beam=1, scores=False))
    ] == _generate(tr, hf, texts, beam=1)
    # The pruning changed what the model says: the export is of the pruned model, not the original.
    original = load_translator(runs[0], precision="fp32")
    assert [
        hs[0].tokens
        for hs in original.search([original.src_vocab.encode(t) for t in texts], original.options(beam=1, scores=False))
    ] != _generate(tr, hf, texts, beam=1)


@pytest.mark.parametrize("which", ["imported", "pruned"])
def test_ctranslate2_export_is_token_identical(runs, tmp_path, which):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from attnlab.export.ctranslate2 import source_tokens

    run = runs[0] if which == "imported" else runs[1]
    out = tmp_path / "ct2"
    assert main(["export", "--checkpoint", str(run), "--format", "ctranslate2", "--out", str(out)]) == 0
    tr = load_translator(run, precision="fp32")
    texts = TEXTS + sentences(12, seed=5)
    ids = [tr.src_vocab.encode(t) for t in texts]
    ours = [
        tr.tgt_vocab.to_tokens(h) for h in [hs[0].tokens for hs in tr.search(ids, tr.options(beam=1, scores=False))]
    ]
    res = ctranslate2.Translator(str(out), intra_threads=1).translate_batch(
        [source_tokens(tr.src_vocab, t) for t in texts],
        beam_size=1,
        max_decoding_length=tr.output_limit(max(map(len, ids)) + 1),
        min_decoding_length=0,
    )
    assert [r.hypotheses[0] for r in res] == ours
    assert len({len(o) for o in ours}) > 1, "every output has the same length: the test does not exercise <eos>"
