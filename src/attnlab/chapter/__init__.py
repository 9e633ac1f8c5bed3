"""The attention chapter's sections as computations (one module each, in the notebooks' order), the report they
fill, and the demo pipeline that runs them all.
"""

from .cues import attention_cues
from .demo import run_demo
from .nadaraya_watson import kernel_regression
from .parameters import count_parameters, params
from .report import Section, TableView, format_table, write_report
from .result import ChapterResult
from .scoring_functions import scaling
from .self_attention import positional_encoding, rotation_matrix
from .time_to_quality import load_measured_curves, measured_curves_path, plot_time_to_quality, time_to_quality_section
from .transformer import norm_comparison

__all__ = [
    "ChapterResult",
    "Section",
    "TableView",
    "attention_cues",
    "count_parameters",
    "format_table",
    "kernel_regression",
    "load_measured_curves",
    "measured_curves_path",
    "norm_comparison",
    "params",
    "plot_time_to_quality",
    "positional_encoding",
    "rotation_matrix",
    "run_demo",
    "scaling",
    "time_to_quality_section",
    "write_report",
]
