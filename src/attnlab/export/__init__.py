"""Model formats out of attnlab (and, in `marian`, into it), through a registry of named formats
(`attnlab.export.formats`):

    export_run("runs/demo/transformer", "ctranslate2", "ct2-model", quantization="int8")
"""

from .formats import FORMATS, export_run
from .tokens import source_tokens

__all__ = ["FORMATS", "export_run", "source_tokens"]
