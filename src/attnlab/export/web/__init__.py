"""The web format: a static folder with the explorer's page, the run's ONNX graphs and onnxruntime-web, which
translates and draws every head in the reader's browser (`exporter`); onnxruntime-web's files come from a
folder given or from the pinned npm package (`runtime_files`)."""

from attnlab.export.web.exporter import check_tokenizer, export, page_html
from attnlab.export.web.runtime_files import pinned_version, runtime_files

__all__ = ["check_tokenizer", "export", "page_html", "pinned_version", "runtime_files"]
