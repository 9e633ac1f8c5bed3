"""Write a static folder that translates with a run's Transformer and shows its attention in the browser.

    attnlab export --format web --checkpoint runs/demo/transformer --out explorer
    python -m http.server -d explorer 8000      # then open http://localhost:8000/?text=i%27m%20home%20.

The folder:
- `index.html` and `static/`: the page of `attnlab serve` itself (serve/static: the views, style and drawing),
  loading `static/source-onnx.js` as its data source instead of `static/source.js` (the server's API), and
  `static/tokenizer.js`, which segments as the run's Python vocabulary does;
- `static/ort/`: onnxruntime-web's wasm build (`attnlab.export.web.runtime_files`);
- `model/`: the ONNX export (`attnlab.export.onnx`), its config.json and vocabularies.

Nothing is fetched from another host. The page decodes greedily (beam 1); beam search, sampling, decoding
options, head switches and the ALiBi/T5/RoPE position maps need `attnlab serve`, and their controls are
hidden. Refused (one line): what the ONNX export refuses, and vocabularies tokenizer.js does not
reproduce (SentencePiece, BPE with its own normalizer).
"""

from __future__ import annotations

import json
import os
import shutil
from importlib import resources
from pathlib import Path

from attnlab.data import data_credit
from attnlab.export.onnx.exporter import claim_export, write_folder
from attnlab.export.web.runtime_files import runtime_files
from attnlab.runs.outputs import write_output
from attnlab.utils.files import read_json_object, write_json

# The explorer's own files (read as data: the export does not import the server)
STATIC = Path(str(resources.files("attnlab") / "serve" / "static"))
SERVER_SOURCE = '<script src="static/source.js"></script>'
BROWSER_SOURCES = (
    '<script src="static/ort/ort.wasm.min.js"></script>\n'
    '<script src="static/tokenizer.js"></script>\n'
    '<script src="static/source-onnx.js"></script>'
)


def page_html(index_html: str) -> str:
    """serve's index.html with the browser's data source in place of the server's."""
    if SERVER_SOURCE not in index_html:
        raise RuntimeError(f"the explorer's index.html no longer loads {SERVER_SOURCE}; update attnlab.export.web")
    return index_html.replace(SERVER_SOURCE, BROWSER_SOURCES)


def check_tokenizer(vocab, side: str) -> None:
    """ValueError (one line) unless tokenizer.js segments `vocab` exactly: a word vocabulary, or a BPE one in
    the book's style with a Metaspace pre-tokenizer and no normalizer, suffixes or byte fallback."""
    kind = getattr(vocab, "kind", type(vocab).__name__)
    if kind == "word":
        return
    why = None
    if kind != "bpe":
        why = f"a {kind} vocabulary"
    elif getattr(vocab, "style", "book") != "book":
        why = "a BPE vocabulary with its own normalizer (style 'plain')"
    else:
        obj = json.loads(vocab.tokenizer.to_str())
        pre, model = obj.get("pre_tokenizer") or {}, obj.get("model") or {}
        if obj.get("normalizer") is not None:
            why = "a BPE vocabulary with a normalizer"
        elif pre.get("type") != "Metaspace" or pre.get("prepend_scheme", "always") != "always" or not pre.get("split"):
            why = f"a BPE vocabulary with the pre-tokenizer {pre.get('type')!r}"
        elif model.get("type") != "BPE" or any(
            model.get(k) for k in ("continuing_subword_prefix", "end_of_word_suffix", "byte_fallback", "dropout")
        ):
            why = "a BPE model with prefixes, suffixes, byte fallback or dropout"
    if why is not None:
        raise ValueError(
            f"the web page's tokenizer reproduces attnlab's word and BPE vocabularies, and the {side} side has "
            f"{why}; use `attnlab serve`, or `attnlab export --format onnx` and tokenize in Python"
        )


def export(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    quantization: str = "float32",
    weights: str | os.PathLike | None = None,
    force: bool = False,
    runtime: str | os.PathLike | None = None,
) -> Path:
    """Write the static explorer of the run `run_dir` to `out_dir` (built beside it, then renamed; `force`
    replaces an earlier web export only). `runtime`: a folder with onnxruntime-web's dist files."""
    claim, translator = claim_export(run_dir, out_dir, "export-web", quantization, weights, force)
    check_tokenizer(translator.src_vocab, "source")
    check_tokenizer(translator.tgt_vocab, "target")
    files = runtime_files(runtime)  # fetched (or refused) before anything is written
    note = {"source_run": str(Path(run_dir).resolve()), "quantization": quantization}
    with write_output(claim, note) as tmp:
        write_page(translator, Path(run_dir), tmp, files, quantization)
    return claim.path


def write_page(translator, run_dir: Path, folder: Path, files: dict[str, Path], quantization: str = "float32") -> None:
    """index.html, static/ (with static/ort/) and model/ into `folder`."""
    static = folder / "static"
    shutil.copytree(STATIC, static, ignore=shutil.ignore_patterns("index.html", "source.js", "__pycache__"))
    (static / "ort").mkdir()
    for name, path in files.items():
        shutil.copyfile(path, static / "ort" / name)
    (folder / "model").mkdir()
    write_folder(translator, run_dir, folder / "model", quantization)
    config = folder / "model" / "config.json"  # the page's footer credits what this model learned from
    credit = data_credit(translator.config.get("data", {}).get("path"))
    write_json(config, {**read_json_object(config, "the export's config"), "data_attribution": credit})
    (folder / "index.html").write_text(page_html((STATIC / "index.html").read_text(encoding="utf-8")), encoding="utf-8")


__all__ = ["check_tokenizer", "export", "page_html", "write_page"]
