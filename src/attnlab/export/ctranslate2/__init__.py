"""attnlab Transformers as CTranslate2 model folders: `converter` builds the spec and writes it, `positions`
maps each position scheme and key/value head layout into CTranslate2's Transformer spec."""

from attnlab.export.tokens import source_tokens

from .converter import QUANTIZATIONS, alignment_export, build_spec, check_exportable, export
from .positions import check_positions, exportable, set_positions, transformer_spec_for

__all__ = [
    "QUANTIZATIONS",
    "alignment_export",
    "build_spec",
    "check_exportable",
    "check_positions",
    "export",
    "exportable",
    "set_positions",
    "source_tokens",
    "transformer_spec_for",
]
