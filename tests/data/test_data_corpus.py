import hashlib
import http.server
import threading
import urllib.error
import zipfile
from functools import partial

import pytest

from attnlab.data import corpus, read_fra_eng, sample_data_path

SMALL = "Go.\tVa !\nI lost.\tJ'ai perdu.\n"


def make_zip(path, text=SMALL):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__MACOSX/fra-eng/._fra.txt", b"\x00\x05junk")
        zf.writestr("fra-eng/_about.txt", "about")
        zf.writestr("fra-eng/fra.txt", text)
    return path


@pytest.fixture
def no_data(monkeypatch, tmp_path):
    """No argument, no ATTNLAB_DATA, an empty cache: read_fra_eng must download."""
    monkeypatch.delenv("ATTNLAB_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "attnlab"


def test_full_corpus_counts(corpus_path):
    pairs, stats = read_fra_eng(corpus_path, return_stats=True)
    assert len(pairs) == 167_130 and stats.malformed == 0 and stats.num_pairs == 167_130
    assert pairs[0] == ("Go.", "Va !")


def test_zip_ignores_macosx_and_txt_ignores_extra_columns(tmp_path):
    assert read_fra_eng(make_zip(tmp_path / "d.zip")) == [("Go.", "Va !"), ("I lost.", "J'ai perdu.")]
    tsv = tmp_path / "d.tsv"
    tsv.write_text("Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM)\n", encoding="utf-8")
    assert read_fra_eng(tsv) == [("Go.", "Va !")]


def test_malformed_lines_are_counted_and_reported(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("Go.\tVa !\nno tab here\n\tempty english\nempty french\t \nHi.\tSalut !\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="skipped 3 malformed"):
        pairs, stats = read_fra_eng(f, return_stats=True)
    assert pairs == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert (stats.malformed, stats.malformed_lines, stats.num_lines) == (3, [2, 3, 4], 5)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_damaged_zip_is_a_clear_error(tmp_path, damage):
    path = make_zip(tmp_path / "fra-eng.zip", SMALL * 200)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a zip at all" * 10)
    with pytest.raises(ValueError, match="truncated or corrupted") as err:
        read_fra_eng(path)
    assert str(path) in str(err.value) and "delete" in str(err.value)


def test_zip_without_fra_txt(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("readme.txt", "x")
    with pytest.raises(ValueError, match=r"no fra.txt"):
        read_fra_eng(path)


def test_explicit_path_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="--data PATH"):
        read_fra_eng(tmp_path / "nope.zip")


def test_missing_data_and_failed_download(no_data, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(corpus, "urlopen", offline)
    with pytest.raises(FileNotFoundError) as err:
        read_fra_eng()
    msg = str(err.value)
    for part in ("ATTNLAB_DATA", "--data PATH", str(no_data / "fra-eng.zip"), "network is unreachable"):
        assert part in msg
    assert not any(no_data.glob("*"))  # no partial download left behind


@pytest.fixture
def file_server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_verifies_and_caches(no_data, file_server, monkeypatch):
    root, url = file_server
    zpath = make_zip(root / "fra-eng.zip")
    digest = hashlib.sha256(zpath.read_bytes()).hexdigest()
    monkeypatch.setattr(corpus, "DATA_URL", f"{url}/fra-eng.zip")
    monkeypatch.setitem(corpus.KNOWN_CHECKSUMS, "sha256", {digest})
    assert read_fra_eng() == [("Go.", "Va !"), ("I lost.", "J'ai perdu.")]
    assert [p.name for p in no_data.iterdir()] == ["fra-eng.zip"]
    assert hashlib.sha256((no_data / "fra-eng.zip").read_bytes()).hexdigest() == digest
    # The second read uses the cache: the server is no longer needed.
    (root / "fra-eng.zip").unlink()
    assert len(read_fra_eng()) == 2


def test_download_checksum_mismatch_leaves_nothing(no_data, file_server, monkeypatch):
    root, url = file_server
    make_zip(root / "fra-eng.zip")
    monkeypatch.setattr(corpus, "DATA_URL", f"{url}/fra-eng.zip")
    with pytest.raises(ValueError, match="checksum mismatch"):
        read_fra_eng()
    assert not no_data.exists() or not any(no_data.iterdir())


def test_sample_data_has_the_books_sentences():
    pairs, stats = read_fra_eng(sample_data_path(), return_stats=True)
    assert stats.malformed == 0 and len(pairs) >= 60
    for pair in [
        ("Go.", "Va !"),
        ("I lost.", "J'ai perdu."),
        ("He's calm.", "Il est calme."),
        ("I'm home.", "Je suis chez moi."),
    ]:
        assert pair in pairs
