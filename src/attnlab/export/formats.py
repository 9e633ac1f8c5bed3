"""The registry of named export formats, and the one call that exports a run in any of them.

    export_run("runs/demo/transformer", "ctranslate2", "ct2-model", quantization="int8")

Each format is a module under `attnlab.export` with `export(run_dir, out_dir, **options) -> Path`, and a line
in `FORMATS` (imported lazily, so an engine that is not installed only matters when its format is asked for).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

# format name -> (module under attnlab.export, one-line description for --help)
FORMATS: dict[str, tuple[str, str]] = {
    "ctranslate2": ("ctranslate2", "a CTranslate2 model folder (model.bin + vocabularies), for its C++ decoder"),
    "hf": ("marian.exporter", "a Hugging Face MarianMTModel folder (config, weights, tokenizer) for transformers"),
    "onnx": ("onnx", "ONNX graphs in Optimum's seq2seq layout (encoder, decoder, decoder with past), for onnxruntime"),
    "web": ("web", "a static explorer page that translates in the browser (onnxruntime-web), no server"),
}


def export_run(run_dir: str | os.PathLike, fmt: str, out_dir: str | os.PathLike, **options) -> Path:
    """Export the run folder `run_dir` in format `fmt` to `out_dir`; returns the written folder."""
    if fmt not in FORMATS:
        raise ValueError(
            f"unknown export format {fmt!r}; expected one of {', '.join(sorted(FORMATS))}; "
            "pass one of those names (attnlab export --help describes each)"
        )
    module = importlib.import_module(f"attnlab.export.{FORMATS[fmt][0]}")
    return module.export(run_dir, out_dir, **options)
