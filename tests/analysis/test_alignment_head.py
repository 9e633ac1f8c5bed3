"""The alignment head `attnlab heads` chooses (word confidence), saved as RUN/alignment.json and used by
`translate --align`, the Translator and the output guard; on a tiny model built from the sample corpus."""

import json

import pytest
import torch
from train_helpers import sample_split, sample_transformer, save_sample_run

from attnlab.analysis.alignment_head import CRITERION, choose_alignment, word_confidence
from attnlab.analysis.heads import validation_batches
from attnlab.attention import record_attention
from attnlab.cli import main
from attnlab.data import load_data
from attnlab.decoding import DecodeOptions
from attnlab.decoding.align import alignment_heads
from attnlab.runs.loading import load_translator
from attnlab.runs.outputs import claim_output

DATA = sample_split()
QUICK = ["--limit", "6", "--no-bleu", "--no-curve"]


@pytest.fixture(scope="module")
def setup(one_thread):
    data = load_data(DATA)
    return data, sample_transformer(data)


@pytest.fixture
def run(setup, tmp_path):
    data, model = setup
    return save_sample_run(tmp_path / "run", model, data)


def test_word_confidence_equals_one_sentence_at_a_time(setup):
    """Batched (padded) scores equal the mean over every real target token computed sentence by sentence,
    unpadded, from the recorded weights without <eos> row and column."""
    data, model = setup
    examples = data.valid[:5]
    scores = word_confidence(
        model, validation_batches(examples, data.src_vocab, data.tgt_vocab, 3), data.src_vocab, data.tgt_vocab
    )
    names = ["decoder.blocks.0.cross_attention", "decoder.blocks.1.cross_attention"]
    assert list(scores) == names
    per_token: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    for ex in examples:
        src = torch.tensor([ex.src_ids + [data.src_vocab.eos]])
        tgt_in = torch.tensor([[data.tgt_vocab.bos] + ex.tgt_ids])
        with torch.no_grad(), record_attention(model) as rec:
            model(src, tgt_in)
        for n in names:
            W = rec.weights[n][0][0]  # (H, T + 1, S + 1)
            per_token[n].append(W[:, : len(ex.tgt_ids), : len(ex.src_ids)].max(dim=-1).values)  # (H, T)
    for n in names:
        expected = torch.cat(per_token[n], dim=1).double().mean(dim=1)
        torch.testing.assert_close(torch.tensor(scores[n], dtype=torch.float64), expected, atol=1e-6, rtol=0)
        assert all(0 < s < 1 for s in scores[n])
    choice = choose_alignment(model, scores)
    flat = [(s, layer, h) for layer, n in enumerate(names) for h, s in enumerate(scores[n])]
    best = max(flat, key=lambda t: t[0])
    assert choice == {"layer": best[1], "heads": [best[2]], "criterion": CRITERION, "score": best[0]}


def test_heads_saves_the_choice_and_translate_uses_it(run, tmp_path, capsys):
    assert main(["heads", "--checkpoint", str(run), "--out", str(tmp_path / "out"), *QUICK]) == 0
    out = capsys.readouterr().out
    saved = json.loads((run / "alignment.json").read_text())
    report = json.loads((tmp_path / "out" / "heads.json").read_text())
    assert {k: saved[k] for k in ("layer", "heads", "criterion", "score")} == report["alignment"]
    assert saved["split"] == "valid" and saved["sentences"] == 6 and saved["attnlab_version"]
    assert "wconf" in out and f"wrote {run / 'alignment.json'}" in out
    layer, head = saved["layer"], saved["heads"][0]
    name = f"decoder.blocks.{layer}.cross_attention"
    assert saved["score"] == max(max(v) for v in report["word_confidence"].values())
    assert report["word_confidence"][name][head] == saved["score"]

    translator = load_translator(run)
    assert alignment_heads(translator.model, None, None, translator.alignment) == (layer, [head])
    texts = ["i'm home .", "he's calm ."]
    api = translator.translate_tokens(texts, options=DecodeOptions(beam=2, align=True))
    explicit = DecodeOptions(beam=2, align=True, align_layer=layer, align_heads=(head,))
    assert [t.alignment for t in api] == [t.alignment for t in translator.translate_tokens(texts, options=explicit)]
    argv = ["translate", "--checkpoint", str(run), "--beam", "2", "--align", *texts]
    assert main(argv) == 0
    by_default = capsys.readouterr().out
    assert main([*argv, "--align-layer", str(layer), "--align-heads", str(head)]) == 0
    assert by_default == capsys.readouterr().out and "|||" in by_default

    # The output guard knows the file as the run's own: train --force may replace the run.
    assert claim_output(run, "run", force=True).replace


@pytest.mark.parametrize(
    "content, words",
    [
        ({"layer": 5, "heads": [0]}, "decoder layer 0..1, got 5"),
        ({"layer": 0, "heads": [9]}, "heads 0..3 of layer 0, got [9]"),
        ({"layer": 0, "heads": []}, '{"layer": L, "heads": [H, ...]}'),
        ("{not json", "cannot be read"),
    ],
)
def test_a_malformed_alignment_json_is_one_line(run, capsys, content, words):
    text = content if isinstance(content, str) else json.dumps({**content, "criterion": "x", "attnlab_version": "0"})
    (run / "alignment.json").write_text(text)
    assert main(["translate", "--checkpoint", str(run), "go ."]) == 0  # plain translation does not read it
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "--align", "go ."]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "alignment.json" in err and "Traceback" not in err, err
    assert main(["translate", "--checkpoint", str(run), "--align", "--align-layer", "0", "go ."]) == 0  # explicit wins


def test_a_users_alignment_json_is_never_replaced(run, tmp_path, capsys):
    (run / "alignment.json").write_text('{"layer": 0, "heads": [1]}')  # hand-written: no criterion, no version
    assert main(["heads", "--checkpoint", str(run), "--out", str(tmp_path / "out"), *QUICK]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "never replaced" in err and "--no-save-alignment" in err, err
    assert not (tmp_path / "out").exists()
    assert main(["heads", "--checkpoint", str(run), "--out", str(tmp_path / "out"), *QUICK, "--no-save-alignment"]) == 0
    assert (run / "alignment.json").read_text() == '{"layer": 0, "heads": [1]}'
    translator = load_translator(run)  # a valid hand-written choice is used like attnlab's own
    assert alignment_heads(translator.model, None, None, translator.alignment) == (0, [1])
