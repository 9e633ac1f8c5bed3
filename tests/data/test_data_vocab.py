import json

import pytest
import torch

from attnlab.data import SubwordVocab, Vocab, load_vocab, read_fra_eng, sample_data_path


def test_index_order_and_specials():
    v = Vocab([["b", "a", "c"], ["a", "b", "d"], ["c", "a"]], min_freq=2)
    # <unk>, reserved, then frequency desc (a:3) and ties alphabetically (b:2, c:2); d (1) is below min_freq.
    assert v.idx_to_token == ["<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "c"]
    assert (v.unk, v.pad, v.bos, v.eos) == (0, 1, 2, 3)
    assert v["d"] == v.unk and v["never-seen"] == v.unk
    assert v[["a", "zzz"]] == [4, 0] and v.to_tokens([4, 5]) == ["a", "b"] and v.to_tokens(6) == "c"
    assert len(v) == 7
    assert Vocab(["b", "a", "c", "a", "b", "d", "c", "a"]) == v  # a flat list gives the same vocabulary


def test_encode_decode():
    v = Vocab([["go", "."], ["go", "away", "!"]] * 2, lang="en")
    ids = v.encode("Go away!")
    assert ids == [v["go"], v["away"], v["!"]]
    assert v.decode([v.bos] + ids + [v.eos, v["go"], v.pad]) == "go away!"
    assert v.decode(torch.tensor(ids + [v.pad, v.pad])) == "go away!"
    assert v.encode("go home") == [v["go"], v.unk]


def test_missing_special_is_a_clear_error():
    v = Vocab(["a", "a"], reserved=())
    with pytest.raises(ValueError, match="<pad>"):
        _ = v.pad


def test_save_load_round_trip(tmp_path):
    v = Vocab([["il", "est", "calme", "."]] * 2, lang="fr")
    v.save(tmp_path / "v.json")
    w = Vocab.load(tmp_path / "v.json")
    assert w == v and w.lang == "fr" and w.idx_to_token == v.idx_to_token
    assert isinstance(load_vocab(tmp_path / "v.json"), Vocab)
    assert [p.name for p in tmp_path.iterdir()] == ["v.json"]  # no temp file left behind


def test_load_rejects_other_json(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="neither"):
        load_vocab(tmp_path / "x.json")
    with pytest.raises(FileNotFoundError):
        load_vocab(tmp_path / "missing.json")


def test_subword_vocab_round_trip(tmp_path):
    pairs = read_fra_eng(sample_data_path())
    bpe = SubwordVocab.train([s for p in pairs for s in p], vocab_size=200, min_freq=1, lang="fr")
    assert (bpe.unk, bpe.pad, bpe.bos, bpe.eos) == (0, 1, 2, 3)
    assert len(bpe) <= 200
    ids = bpe.encode("Je suis chez moi.")
    assert bpe.decode([bpe.bos] + ids + [bpe.eos, 7]) == "je suis chez moi."
    assert bpe.decode(bpe.encode("Va !")) == "va !"
    assert bpe.unk in bpe.encode("Zq€")  # characters never seen in training
    bpe.save(tmp_path / "bpe.json")
    loaded = load_vocab(tmp_path / "bpe.json")
    assert isinstance(loaded, SubwordVocab) and loaded == bpe and loaded.lang == "fr"
    assert loaded.encode("Je suis chez moi.") == ids
    assert json.loads((tmp_path / "bpe.json").read_text())["model"]["type"] == "BPE"


@pytest.mark.parametrize("field", ["model", "pre_tokenizer", "version"])
def test_a_fake_bpe_vocabulary_file_is_a_clear_error(tmp_path, field):
    """A tokenizer JSON whose fields were tampered with is one ValueError naming the file, not the Rust
    parser's bare Exception."""
    vocab = SubwordVocab.train(["hello world", "bonjour le monde"] * 20, vocab_size=60, min_freq=1)
    path = tmp_path / "src_vocab.json"
    vocab.save(path)
    obj = json.loads(path.read_text())
    obj[field] = "garbage"
    path.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match="not a valid Hugging Face tokenizer JSON"):
        load_vocab(path)
