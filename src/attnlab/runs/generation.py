"""RUN/generation.json: the decoding defaults a translator run carries (as Hugging Face's
generation_config.json does), so `translate`, `evaluate`, `Translator.translate`, the REST API and the
explorer decode the same way unless told otherwise.

    {"beam": 4, "n_best": 1, "length_penalty": 1.0, "early_stopping": false, ...}

Training writes it with the run (`TRANSLATOR_DEFAULTS`: beam 4); a run without it (older runs, imported
ones) decodes with `TRANSLATOR_DEFAULTS`. Only the search fields (`DEFAULTABLE`) may be set; a file that is
not such an object is one line naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from attnlab.decoding.options import DEFAULTABLE, TRANSLATOR_DEFAULTS, DecodeOptions
from attnlab.runs.layout import GENERATION_FILE
from attnlab.utils.files import write_json

__all__ = ["generation_values", "read_generation", "write_generation"]


def generation_values(options: DecodeOptions) -> dict:
    """`options`' search fields (`DEFAULTABLE`), as generation.json and exported config.json files hold them."""
    values = asdict(options)
    return {k: values[k] for k in DEFAULTABLE}


def write_generation(run_dir: str | os.PathLike, options: DecodeOptions = TRANSLATOR_DEFAULTS) -> None:
    """Write `options`' search fields as RUN/generation.json (atomically)."""
    write_json(Path(run_dir) / GENERATION_FILE, generation_values(options))


def read_generation(run_dir: str | os.PathLike) -> DecodeOptions:
    """The run's decoding defaults: RUN/generation.json, else `TRANSLATOR_DEFAULTS`; ValueError (one line
    naming the file) for one that is not JSON, sets other fields, or holds values DecodeOptions refuses."""
    path = Path(run_dir) / GENERATION_FILE
    if not path.is_file():
        return TRANSLATOR_DEFAULTS
    fix = f"mend it, or delete it (the run then decodes with beam {TRANSLATOR_DEFAULTS.beam})"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}: {exc}); {fix}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object of decoding options; {fix}")
    other = sorted(set(data) - set(DEFAULTABLE))
    if other:
        raise ValueError(f"{path} sets {', '.join(other)}; it may set only {', '.join(DEFAULTABLE)}; {fix}")
    try:
        return DecodeOptions.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}; {fix}") from None
