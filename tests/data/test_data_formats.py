"""Reading corpora: every malformed-input case is counted with line numbers, or a one-line error."""

import gzip

import pytest

from attnlab.data.formats import CorpusReport, iter_pairs


def _read(spec, **kw):
    report = CorpusReport(files=[])
    pairs = list(iter_pairs(spec, report, **kw))
    return pairs, report


def test_tsv_extra_columns_ignored_and_bad_lines_reported(tmp_path):
    p = tmp_path / "c.tsv"
    p.write_bytes(
        b"Hallo\tHello\tCC-BY attribution\n"  # 1 ok, third column ignored
        b"\tempty source\n"  # 2 empty
        b"no tab here\n"  # 3 no tab
        b"\xff\xfe broken\tbytes\n"  # 4 undecodable
        + b"x" * 50
        + b"\ty\n"  # 5 over-long (max_chars=40)
        + b"Tsch\xc3\xbcss\tBye\r\n"
    )  # 6 ok (CRLF)
    pairs, report = _read(p, max_chars=40)
    assert pairs == [(1, "Hallo", "Hello"), (6, "Tschüss", "Bye")]
    f = report.files[0]
    assert f.lines == 6 and report.pairs == 2
    assert f.first_lines == {
        "empty": [2],
        "without a tab (need src<TAB>tgt)": [3],
        "undecodable (not UTF-8)": [4],
        "over-long (> 40 characters)": [5],
    }
    assert "line(s) 4" in f.summary() and str(p) in f.summary()


def test_aligned_gz_files_and_per_file_reports(tmp_path):
    src, tgt = tmp_path / "t.de", tmp_path / "t.en.gz"
    src.write_text("eins\n\ndrei\nvier\n", encoding="utf-8")
    with gzip.open(tgt, "wt", encoding="utf-8") as f:
        f.write("one\ntwo\n\nfour\n")
    pairs, report = _read(f"{src},{tgt}")
    assert pairs == [(1, "eins", "one"), (4, "vier", "four")]
    assert report.files[0].first_lines == {"empty": [2]}  # the source file's own problem
    assert report.files[1].first_lines == {"empty": [3]}  # the target file's


def test_misaligned_files_are_one_clear_error(tmp_path):
    (tmp_path / "a.de").write_text("a\nb\nc\n")
    (tmp_path / "a.en").write_text("a\nb\n")
    with pytest.raises(ValueError, match=r"misaligned corpus: .*a.de has 3 lines but .*a.en has 2"):
        list(iter_pairs(f"{tmp_path / 'a.de'},{tmp_path / 'a.en'}"))


def test_missing_file_damaged_gz_and_bad_spec(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(iter_pairs(tmp_path / "nope.tsv"))
    bad = tmp_path / "x.de.gz"
    bad.write_bytes(b"not gzip at all")
    (tmp_path / "x.en").write_text("a\n")
    with pytest.raises(ValueError, match=r"damaged .gz|not gzip"):
        list(iter_pairs(f"{bad},{tmp_path / 'x.en'}"))
    with pytest.raises(ValueError, match="two aligned files"):
        list(iter_pairs("a,b,c"))


def test_each_skipped_line_is_counted_once(tmp_path):
    """A TSV line bad on both sides is one skipped line in its file's report, not one per side."""
    p = tmp_path / "c.tsv"
    p.write_bytes(b"ok\tfine\n\t\n" + b"x" * 50 + b"\t" + b"y" * 50 + b"\n\t" + b"z" * 50 + b"\nok\tfine\n")
    pairs, report = _read(p, max_chars=40)
    f = report.files[0]
    assert [n for n, _, _ in pairs] == [1, 5] and report.pairs == 2 and report.skipped == 3
    assert f.counts == {"empty": 2, "over-long (> 40 characters)": 1}
    assert f.first_lines == {"empty": [2, 4], "over-long (> 40 characters)": [3]}
    assert "2 empty (line(s) 2, 4)" in f.summary()
    # Aligned files: each file counts its own bad lines; the pair is skipped once.
    (tmp_path / "a.de").write_text("eins\n\ndrei\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("one\n\nthree\n", encoding="utf-8")
    pairs, report = _read(f"{tmp_path / 'a.de'},{tmp_path / 'a.en'}")
    assert report.skipped == 1 and [r.counts for r in report.files] == [{"empty": 1}, {"empty": 1}]


def test_over_long_by_tokens_counts_a_tsv_line_once(tmp_path):
    from attnlab.data import prepare

    lines = [f"w{i} w{i + 1}\tv{i} v{i + 1}" for i in range(30)] + ["a b c d e f g\tq r s t u v w"]
    (tmp_path / "c.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta = prepare(tmp_path / "c.tsv", tmp_path / "p", src_lang="de", tgt_lang="en", tokenizer="word", min_freq=1,
                   max_len=4, valid_fraction=0.0, test_fraction=0.0, log=lambda line: None)  # fmt: skip
    (f,) = meta["reports"]["data"]["files"]
    assert f["counts"] == {"over-long (> 4 tokens)": 1} and f["first_lines"] == {"over-long (> 4 tokens)": [31]}
    assert meta["reports"]["data"]["skipped"] == 1 and meta["splits"]["train"]["pairs"] == 30


@pytest.mark.parametrize(
    ("encoding", "bom", "named"),
    [
        ("utf-16", True, "UTF-16LE"),  # Python writes the machine's order, little-endian here, with a mark
        ("utf-16-be", False, "UTF-16BE"),
        ("utf-16-le", False, "UTF-16LE"),
        ("utf-32", True, "UTF-32LE"),
        ("utf-32-be", False, "UTF-32BE"),
    ],
)
def test_utf16_and_utf32_corpora_are_refused_with_the_fix(tmp_path, encoding, bom, named):
    text = "Hallo Welt\tHello world\nGuten Tag\tGood day\n"
    (tmp_path / "c.tsv").write_bytes(text.encode(encoding))
    with pytest.raises(ValueError, match=rf"c.tsv is {named} text .*not UTF-8.*iconv -f {named[:6]} -t UTF-8"):
        list(iter_pairs(tmp_path / "c.tsv"))
    (tmp_path / "a.de").write_text("Hallo\n", encoding="utf-8")
    with gzip.open(tmp_path / "a.en.gz", "wb") as f:
        f.write("Hello\n".encode(encoding))
    with pytest.raises(ValueError, match=rf"a.en.gz is {named} text"):
        list(iter_pairs(f"{tmp_path / 'a.de'},{tmp_path / 'a.en.gz'}"))


def test_utf16_is_refused_by_the_book_loader_and_prepare_cli(tmp_path, capsys):
    from attnlab.cli import main
    from attnlab.data.corpus import read_fra_eng

    (tmp_path / "fra.txt").write_bytes("Go.\tVa !\n".encode("utf-16"))
    with pytest.raises(ValueError, match="UTF-16LE text"):
        read_fra_eng(tmp_path / "fra.txt")
    args = ["prepare", "--data", str(tmp_path / "fra.txt"), "--src-lang", "en", "--tgt-lang", "fr"]
    assert main([*args, "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "iconv -f UTF-16 -t UTF-8" in err and not (tmp_path / "p").exists()


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    from attnlab.data.corpus import read_fra_eng

    (tmp_path / "c.tsv").write_bytes(b"\xef\xbb\xbfHallo\tHello\nJa\tYes\n")
    pairs, report = _read(tmp_path / "c.tsv")
    assert pairs == [(1, "Hallo", "Hello"), (2, "Ja", "Yes")] and report.skipped == 0
    (tmp_path / "a.de").write_bytes(b"\xef\xbb\xbfHallo\n")
    (tmp_path / "a.en").write_bytes(b"\xef\xbb\xbfHello\n")
    assert _read(f"{tmp_path / 'a.de'},{tmp_path / 'a.en'}")[0] == [(1, "Hallo", "Hello")]
    assert read_fra_eng(tmp_path / "c.tsv")[0] == ("Hallo", "Hello")


def test_a_nul_byte_in_a_later_line_skips_that_line(tmp_path):
    (tmp_path / "c.tsv").write_bytes(b"Hallo\tHello\n" + b"a" * 5000 + b"\tb\nbin\x00ary\tx\nJa\tYes\n")
    pairs, report = _read(tmp_path / "c.tsv", max_chars=10_000)
    assert [n for n, _, _ in pairs] == [1, 2, 4]
    assert report.files[0].first_lines == {"with NUL bytes (binary, not text)": [3]}


def test_a_folder_given_as_a_corpus_says_so(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.de").write_text("a\n")
    with pytest.raises(FileNotFoundError, match=r"is a folder \(it holds train.de\), not a corpus file; pass a file"):
        list(iter_pairs(tmp_path / "corpus"))
    (tmp_path / "prep").mkdir()
    (tmp_path / "prep" / "meta.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"is a prepared corpus .*attnlab train --data"):
        list(iter_pairs(f"{tmp_path / 'prep'},{tmp_path / 'corpus' / 'train.de'}"))


def test_one_nul_byte_in_the_first_lines_of_utf8_is_a_bad_line_not_utf16(tmp_path):
    """A UTF-8 corpus with one NUL in its first 4 KiB: that line is skipped and named; converting the file
    from UTF-16, as the NUL alone once suggested, would garble every line."""
    (tmp_path / "c.tsv").write_bytes(b"Hallo\tHello\nbin\x00ary\tx\nJa\tYes\n")
    pairs, report = _read(tmp_path / "c.tsv")
    assert [n for n, _, _ in pairs] == [1, 3]
    assert report.files[0].first_lines == {"with NUL bytes (binary, not text)": [2]}
