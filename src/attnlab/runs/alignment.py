"""RUN/alignment.json: the cross-attention layer and heads `attnlab heads` chose for word alignments.

    {"layer": 0, "heads": [2], "criterion": "word confidence: ...", "score": 0.61, "split": "valid",
     "sentences": 200, "attnlab_version": "..."}

`save_alignment` writes it atomically (a temp file beside it, then a rename), only into a folder that is an
attnlab run, and never over an alignment.json attnlab did not write. `read_alignment` gives what
`load_translator` keeps as the Translator's default (`attnlab.decoding.align.SavedAlignment`); the
layer and heads are checked against the model when an alignment is asked for.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnlab import __version__
from attnlab.decoding.align import SavedAlignment
from attnlab.runs.layout import ALIGNMENT_FILE
from attnlab.runs.outputs import output_kind
from attnlab.utils.files import read_json, write_json

__all__ = ["alignment_target", "read_alignment", "save_alignment"]


def read_alignment(run_dir: str | os.PathLike) -> SavedAlignment | None:
    """RUN/alignment.json as read (an unreadable one keeps its error for when it is used), or None."""
    path = Path(run_dir) / ALIGNMENT_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return SavedAlignment(str(path), read_json(path, "alignment file"))
    except (OSError, ValueError) as exc:
        return SavedAlignment(str(path), error=str(exc))


def _ours(path: Path) -> bool:
    try:
        d = read_json(path, "alignment file")
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and "criterion" in d and "attnlab_version" in d


def alignment_target(run_dir: str | os.PathLike) -> tuple[Path | None, str | None]:
    """(where alignment.json may be written, None) or (None, why not: a note for the user); checked before
    any work. An alignment.json attnlab did not write is a ValueError: it is never replaced."""
    run_dir = Path(run_dir)
    path = run_dir / ALIGNMENT_FILE
    if output_kind(run_dir) != "run":
        return None, f"{run_dir} is not an attnlab run folder; the alignment choice is not saved"
    if (path.exists() or path.is_symlink()) and not _ours(path):  # a dangling link is not ours either
        raise ValueError(
            f"{path} was not written by `attnlab heads` and is never replaced; move it away, or pass "
            "--no-save-alignment"
        )
    if not os.access(run_dir, os.W_OK):
        return None, f"cannot write in {run_dir}; the alignment choice is not saved (see heads.json)"
    return path, None


def save_alignment(path: str | os.PathLike, choice: dict, split: str, sentences: int) -> dict:
    """Write the choice (`attnlab.analysis.alignment_head.choose_alignment`) to `path` (from `alignment_target`),
    atomically; returns what was written."""
    record = {**choice, "split": split, "sentences": sentences, "attnlab_version": __version__}
    write_json(path, record)
    return record
