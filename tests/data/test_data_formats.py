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
