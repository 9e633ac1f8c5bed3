"""RUN/generation.json: the decoding defaults a translator run carries (as Hugging Face's
generation_config.json does), so `translate`, `evaluate`, `Translator.translate`, the REST API and the
explorer decode the same way unless told otherwise.

    {"beam": 4, "n_best": 1, "length_penalty": 1.0, "early_stopping": false, ...}

Training writes it with the run (`TRANSLATOR_DEFAULTS`: beam 4); a run without it (older runs, imported
ones) decodes with `TRANSLATOR_DEFAULTS`. Only the search fields (`DEFAULTABLE`) may be set, n_best only to
1 and min_len only within every sentence's output limit; a file that is not such an object (a folder, a
dangling link, bad or deep JSON) is one line naming it.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from attnlab.decoding.options import DEFAULTABLE, TRANSLATOR_DEFAULTS, DecodeOptions
from attnlab.runs.layout import GENERATION_FILE
from attnlab.utils.files import read_json, write_json

__all__ = ["generation_values", "read_generation", "write_generation"]


def generation_values(options: DecodeOptions) -> dict:
    """`options`' search fields (`DEFAULTABLE`), as generation.json and exported config.json files hold them."""
    values = asdict(options)
    return {k: values[k] for k in DEFAULTABLE}


SHORTEST_LIMIT = 12  # the output limit of a one-token source (<eos> included): 2 x 1 + 10 (Translator.output_limit)


def write_generation(run_dir: str | os.PathLike, options: DecodeOptions = TRANSLATOR_DEFAULTS) -> None:
    """Write `options`' search fields as RUN/generation.json (atomically)."""
    write_json(Path(run_dir) / GENERATION_FILE, generation_values(options))


def read_generation(run_dir: str | os.PathLike) -> DecodeOptions:
    """The run's decoding defaults: RUN/generation.json, else `TRANSLATOR_DEFAULTS`; ValueError (one line
    naming the file) for one that is not JSON, sets other fields, or holds values DecodeOptions refuses."""
    path = Path(run_dir) / GENERATION_FILE
    if not path.exists() and not path.is_symlink():
        return TRANSLATOR_DEFAULTS
    fix = f"mend it, or delete it (the run then decodes with beam {TRANSLATOR_DEFAULTS.beam})"
    try:
        data = read_json(path, "decoding defaults file")
    except (OSError, ValueError) as exc:  # a folder, a dangling link, bad JSON: never ignored silently
        raise ValueError(f"{str(exc).split('; ')[0]}; {fix}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object of decoding options; {fix}")
    other = sorted(set(data) - set(DEFAULTABLE))
    if other:
        raise ValueError(f"{path} sets {', '.join(other)}; it may set only {', '.join(DEFAULTABLE)}; {fix}")
    if data.get("n_best", 1) != 1:  # a run's default is one translation per sentence; more is asked per call
        raise ValueError(f"{path} sets n_best={data['n_best']!r}; ask for n-best lists per call (--n-best, "
                         f"options.n_best), not as a run default; {fix}")  # fmt: skip
    try:
        options = DecodeOptions.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}; {fix}") from None
    if options.max_len is None and options.min_len > SHORTEST_LIMIT - 1:
        raise ValueError(
            f"{path} sets min_len={options.min_len}, more than a one-token sentence's output limit allows "
            f"({SHORTEST_LIMIT - 1}: limits are 2 x source tokens + 10); set min_len at most {SHORTEST_LIMIT - 1} "
            f"(or a max_len above it); {fix}"
        )
    return options
