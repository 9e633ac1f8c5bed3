"""The ONNX format: the Transformer's encoder and decoders as Optimum-layout graphs (`exporter`), traced from
plain-tensor modules (`graphs`), and greedy decoding of an export with onnxruntime (`runtime`)."""

from attnlab.export.onnx.exporter import (
    QUANTIZATIONS,
    check_exportable,
    export,
    io_names,
    onnx_config,
    write_folder,
)
from attnlab.export.onnx.runtime import OnnxOutput, OnnxTranslator

__all__ = [
    "QUANTIZATIONS",
    "OnnxOutput",
    "OnnxTranslator",
    "check_exportable",
    "export",
    "io_names",
    "onnx_config",
    "write_folder",
]
