"""Finding, downloading and reading the English–French corpus (Tatoeba via manythings.org, CC-BY 2.0 FR).

Where `read_fra_eng` looks, in order:
  1. the `path` argument (the CLI's `--data PATH`);
  2. the environment variable `ATTNLAB_DATA`;
  3. the user cache, `$XDG_CACHE_HOME/attnlab/fra-eng.zip` (default `~/.cache/attnlab/fra-eng.zip`);
  4. a download from the book's URL into that cache, checked against known checksums.

It reads the zip as published (ignoring `__MACOSX/` entries) or a plain tab-separated `.txt`/`.tsv`.
Malformed lines are skipped but counted: a warning says how many, and
`read_fra_eng(..., return_stats=True)` returns a `ReadStats` with the count and their line numbers.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import urllib.error
import urllib.request
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from tqdm import tqdm

from attnlab.utils.files import atomic_path

DATA_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
# Our shared copy (sha256) and the copy the book's code downloads (sha1): packed differently, same data.
KNOWN_CHECKSUMS = {
    "sha256": {"161c93f18da3a7e6df611ed961426613260de8af06ccf8c79c977afe5135ac44"},
    "sha1": {"94646ad1522d915e7b0f9296181140edcf86a4f5"},
}
ENV_VAR = "ATTNLAB_DATA"
CACHE_FILE_NAME = "fra-eng.zip"
DOWNLOAD_TIMEOUT_S = 30
HEAD_BYTES = 4096  # how much of a text file is looked at to tell its encoding
_FIXES = (
    f"fix: pass --data PATH (a fra-eng.zip or fra.txt), or set {ENV_VAR}=PATH; "
    "the data is at http://www.manythings.org/anki/ (fra-eng.zip)"
)

# Tests replace this to serve a local file; it is looked up at call time for that reason.
urlopen = urllib.request.urlopen


def cache_dir() -> Path:
    """attnlab's user cache folder: `$XDG_CACHE_HOME/attnlab`, default `~/.cache/attnlab`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnlab"


def sample_data_path() -> Path:
    """A tiny English–French sample written for attnlab (not from the corpus), for offline demos."""
    return Path(str(resources.files("attnlab.data") / "sample" / "fra-eng-sample.txt"))


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_fra_eng(dest: str | os.PathLike | None = None, url: str | None = None, progress: bool = True) -> Path:
    """Download the corpus zip to `dest` (default: the user cache), verify it, write it atomically.

    The file is streamed into a temp file beside `dest` while both sha256 and sha1 are computed;
    only a file matching a known checksum is renamed into place, so the cache never holds a partial
    or wrong download. Raises `ValueError` on a checksum mismatch, `OSError` on network errors.
    """
    dest = Path(dest) if dest is not None else cache_dir() / CACHE_FILE_NAME
    url = url or DATA_URL
    dest.parent.mkdir(parents=True, exist_ok=True)
    sha256, sha1 = hashlib.sha256(), hashlib.sha1()
    with atomic_path(dest, suffix=".part") as tmp:  # renamed into place only if the checksum matches
        with open(tmp, "wb") as out, urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with tqdm(
                total=total, unit="B", unit_scale=True, desc=f"downloading {dest.name}", disable=not progress
            ) as bar:
                for chunk in iter(lambda: resp.read(1 << 16), b""):
                    out.write(chunk)
                    sha256.update(chunk)
                    sha1.update(chunk)
                    bar.update(len(chunk))
        if sha256.hexdigest() not in KNOWN_CHECKSUMS["sha256"] and sha1.hexdigest() not in KNOWN_CHECKSUMS["sha1"]:
            raise ValueError(
                f"checksum mismatch for {url}: got sha256 {sha256.hexdigest()} / sha1 {sha1.hexdigest()}, "
                f"expected sha256 in {sorted(KNOWN_CHECKSUMS['sha256'])} or sha1 in "
                f"{sorted(KNOWN_CHECKSUMS['sha1'])}; nothing was saved. Try again later, or {_FIXES}"
            )
    return dest


def resolve_data_path(path: str | os.PathLike | None = None, download: bool = True) -> Path:
    """Find the corpus file (see the module docstring for the order); download it if allowed."""
    if path is not None:
        return _existing(Path(path), "the --data/path argument")
    env = os.environ.get(ENV_VAR)
    if env:
        return _existing(Path(env), f"${ENV_VAR}")
    cached = cache_dir() / CACHE_FILE_NAME
    if cached.is_file():
        return cached
    looked = [f"${ENV_VAR} (not set)", str(cached)]
    if not download:
        raise FileNotFoundError(f"English–French data not found; looked in: {'; '.join(looked)}. {_FIXES}")
    try:
        return download_fra_eng(cached)
    except (OSError, urllib.error.URLError) as exc:
        raise FileNotFoundError(
            f"English–French data not found; looked in: {'; '.join(looked)}; downloading {DATA_URL} "
            f"failed ({exc}). {_FIXES}"
        ) from exc


def _existing(path: Path, what: str) -> Path:
    if path.is_dir():
        # A folder: accept the usual layouts (the zip, the unpacked folder, or fra.txt itself).
        for name in (CACHE_FILE_NAME, "fra-eng/fra.txt", "fra.txt"):
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(f"{what} is a folder ({path}) without fra-eng.zip or fra.txt in it. {_FIXES}")
    if not path.is_file():
        raise FileNotFoundError(f"{what} points to {path}, which does not exist. {_FIXES}")
    return path


@dataclass
class ReadStats:
    """What `read_fra_eng` saw: `malformed_lines` holds the 1-based line numbers it skipped."""

    path: str
    num_lines: int = 0
    num_pairs: int = 0
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)


_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "UTF-32LE"),
    (codecs.BOM_UTF32_BE, "UTF-32BE"),
    (codecs.BOM_UTF16_LE, "UTF-16LE"),
    (codecs.BOM_UTF16_BE, "UTF-16BE"),
)


def _guess_wide(head: bytes) -> str:
    """UTF-16/32 and byte order from where the NULs of mostly-ASCII text fall."""
    if len(head) >= 4 and head[1:4] == b"\0\0\0":
        return "UTF-32LE"
    if len(head) >= 4 and head[:3] == b"\0\0\0":
        return "UTF-32BE"
    return "UTF-16LE" if head[1::2].count(0) >= head[0::2].count(0) else "UTF-16BE"


def check_utf8_head(head: bytes, path: str | os.PathLike, member: str | None = None) -> None:
    """ValueError when the first bytes of a text file (or of zip `member`) show UTF-16 or UTF-32 (a
    byte-order mark, or NUL bytes, which UTF-8 text never holds): read as UTF-8 they would give
    NUL-interleaved tokens."""
    encoding = next((enc for bom, enc in _BOMS if head.startswith(bom)), None)
    why = "its byte-order mark"
    # UTF-16/32 of mostly-ASCII text is a quarter NULs or more; a stray NUL in UTF-8 text is a bad line,
    # which the readers report by line number, not a wide encoding (converting would garble it).
    if encoding is None and head.count(0) >= max(1, len(head) // 4):
        encoding, why = _guess_wide(head), "NUL bytes"
    if encoding is None:
        return
    iconv = f"iconv -f {encoding[:6]} -t UTF-8"
    name = Path(member or path).name
    how = f"unzip -p {path} {member} | {iconv} > {name}" if member else f"{iconv} {path} > {name}.utf8"
    where = f"{path} ({member})" if member else str(path)
    raise ValueError(f"{where} is {encoding} text ({why}), not UTF-8; convert it (e.g. `{how}`) and pass that file")


def read_text(path: str | os.PathLike) -> str:
    """The corpus text: `fra.txt` from a zip (any folder, `__MACOSX/` ignored) or a plain text file."""
    path = Path(path)
    if path.suffix.lower() != ".zip":
        raw = path.read_bytes()
        check_utf8_head(raw[:HEAD_BYTES], path)
        return raw.decode("utf-8-sig")  # a UTF-8 byte-order mark is not part of the first sentence
    is_cache = path.resolve() == (cache_dir() / CACHE_FILE_NAME).resolve()
    fix = (
        f"delete {path} and run again to re-download it"
        if is_cache
        else f"replace {path} with a good copy (or delete it and let attnlab download one)"
    )
    try:
        with zipfile.ZipFile(path) as zf:
            members = [n for n in zf.namelist() if not n.startswith("__MACOSX/") and n.rsplit("/", 1)[-1] == "fra.txt"]
            if not members:
                raise ValueError(f"{path} has no fra.txt member (found: {zf.namelist()[:10]}); {fix}")
            data = zf.read(members[0])
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        # A truncated download or a damaged file: say so plainly instead of a zipfile traceback.
        raise ValueError(f"{path} is truncated or corrupted ({type(exc).__name__}: {exc}); {fix}") from None
    check_utf8_head(data[:HEAD_BYTES], path, members[0])
    return data.decode("utf-8-sig")


def parse_pairs(text: str, source: str = "<text>") -> tuple[list[tuple[str, str]], ReadStats]:
    """Tab-separated lines -> (english, french) pairs; extra columns (attribution) are ignored."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it is not an empty line
    pairs, bad = [], []
    for lineno, line in enumerate(lines, 1):
        parts = line.rstrip("\r").split("\t", 2)
        if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
            bad.append(lineno)
            continue
        pairs.append((parts[0], parts[1]))
    stats = ReadStats(path=source, num_lines=len(lines), num_pairs=len(pairs), malformed=len(bad), malformed_lines=bad)
    return pairs, stats


def read_fra_eng(path: str | os.PathLike | None = None, *, return_stats: bool = False, download: bool = True):
    """Raw (english, french) pairs in file order.

    Args:
        path: a `.zip`, `.txt` or `.tsv` file (or a folder holding one); None to search (module doc).
        return_stats: also return a `ReadStats` (malformed line count and line numbers).
        download: allow downloading into the user cache when nothing is found.

    Returns:
        `pairs` or `(pairs, stats)`. Malformed lines (no tab, an empty side) are skipped and a
        `UserWarning` says how many.
    """
    resolved = resolve_data_path(path, download=download)
    pairs, stats = parse_pairs(read_text(resolved), source=str(resolved))
    if stats.malformed:
        warnings.warn(
            f"{resolved}: skipped {stats.malformed} malformed line(s) (no tab or an empty side), "
            f"e.g. line(s) {stats.malformed_lines[:5]}",
            stacklevel=2,
        )
    return (pairs, stats) if return_stats else pairs
