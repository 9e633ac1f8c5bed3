"""Training data from any parallel corpus: the one entry `load_data` uses for non-book inputs.

`--data` may name a prepared folder (`attnlab prepare`), two aligned files `a.xx,a.yy`, a `.gz` file,
or, with `--src-lang/--tgt-lang/--valid/--test`, any TSV. Raw corpora are prepared once into the user
cache, under a key made of the files' sha256 and every setting, then opened like a prepared folder:
one format and one batching path for small and large corpora alike. The book's zip/TSV without those
options keeps the book's loader (`load_translation_data`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..corpus import cache_dir, file_sha256
from ..formats import split_spec
from .layout import VERSION
from .pipeline import prepare
from .reader import is_prepared, open_prepared

_PARALLEL_KEYS = {"src_lang", "tgt_lang", "valid", "test", "normalization", "vocab_size", "shard_size"}
# Keys of the book loader's settings (presets pass them) and what they become here.
_RENAMED = {"bpe_vocab_size": "vocab_size"}
_IGNORED = {"holdout_duplicates", "use_cache", "loader"}  # always by source / always cached


def _hash_specs(specs: Sequence[str | None]) -> str:
    h = hashlib.sha256()
    for spec in specs:
        for p in split_spec(spec) if spec else []:
            h.update(file_sha256(p).encode())
        h.update(b"|")
    return h.hexdigest()


def wants_parallel(opts: Mapping[str, Any]) -> bool:
    """Whether a `translation` data config should go through this loader instead of the book's."""
    path = opts.get("path")
    if any(opts.get(k) is not None for k in _PARALLEL_KEYS):
        return True
    if path is None:
        return False
    path = str(path)
    return "," in path or path.endswith(".gz") or is_prepared(path)


def load_parallel_data(opts: Mapping[str, Any]):
    """`TranslationData` for a prepared folder or a raw corpus (prepared into the cache first)."""
    opts = {_RENAMED.get(k, k): v for k, v in opts.items() if k not in _IGNORED and v is not None}
    path = opts.pop("path", None)
    if path is None:
        raise ValueError("a corpus is needed: pass --data (a TSV, 'src_file,tgt_file' or a prepared folder)")
    if is_prepared(path):
        return open_prepared(path)
    if "," in str(path) and not (opts.get("src_lang") and opts.get("tgt_lang")):
        raise ValueError(
            f"two aligned files ({path}) need --src-lang and --tgt-lang (e.g. --src-lang de "
            f"--tgt-lang en) to choose their preprocessing"
        )
    opts.setdefault("src_lang", "en")
    opts.setdefault("tgt_lang", "fr")
    for spec in (path, opts.get("valid"), opts.get("test")):
        if spec is not None:
            split_spec(spec)
    settings = json.dumps({"path": str(path), "format_version": VERSION, **opts}, sort_keys=True)
    key = hashlib.sha256((_hash_specs([path, opts.get("valid"), opts.get("test")]) + settings).encode()).hexdigest()
    folder = cache_dir() / "prepared" / key[:32]
    if is_prepared(folder):
        try:
            return _opened(open_prepared(folder), path, folder)
        except ValueError as exc:  # a damaged cache entry is ours to rebuild
            warnings.warn(f"rebuilding the prepared cache {folder}: {exc}", stacklevel=2)
            shutil.rmtree(folder, ignore_errors=True)
    if not is_prepared(folder):
        try:
            prepare(path, folder, **opts)
        except TypeError as exc:  # an unknown key in the run's data section
            raise ValueError(f"unknown data setting for a parallel corpus: {exc}") from None
        except (OSError, ValueError):
            if not is_prepared(folder):  # another process (a DDP rank) may have prepared it first
                raise
    return _opened(open_prepared(folder), path, folder)


def _opened(data, path, folder):
    data.settings.update(data_path=str(path), cache=str(folder))
    return data
