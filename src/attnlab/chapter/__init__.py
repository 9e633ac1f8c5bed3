"""The attention chapter's sections as computations (one module each, in the notebooks' order), the report they
fill, and the demo pipeline that runs them all.
"""

from .budget import DEFAULT_BUDGET, DemoClock, StageTime, budget_section, free_threads, load_quiet_reference
from .cues import attention_cues
from .demo import SAMPLE_CREDIT, SCALES, cli_command, data_credit, find_data, run_demo, train_model
from .nadaraya_watson import kernel_regression
from .parameters import (
    TRANSFORMER_SETTINGS,
    AttentionParams,
    FFNParams,
    TransformerParams,
    attention_param_table,
    complexity_table,
    count_parameters,
    ffn_param_table,
    params,
    transformer_param_table,
)
from .report import Section, TableView, format_cell, format_table, prepare_output_dir, write_report
from .result import ChapterResult
from .scoring_functions import scaling, scaling_stats, softmax_jacobian_norm
from .self_attention import positional_encoding, rotation_matrix, sinusoid_reference
from .time_to_quality import (
    PLAIN_RECIPE,
    held_out_sources,
    load_measured_curves,
    measured_curves_path,
    plot_time_to_quality,
    run_curve,
    score_sources,
    time_to_quality_section,
    training_seconds,
)
from .transformer import norm_comparison
from .translators import TrainedModel, draw_attention, evaluate_test, four_sentences, which_heads

__all__ = [
    "ChapterResult",
    "attention_cues",
    "kernel_regression",
    "softmax_jacobian_norm",
    "scaling_stats",
    "scaling",
    "count_parameters",
    "AttentionParams",
    "FFNParams",
    "TransformerParams",
    "attention_param_table",
    "TRANSFORMER_SETTINGS",
    "ffn_param_table",
    "transformer_param_table",
    "complexity_table",
    "params",
    "sinusoid_reference",
    "rotation_matrix",
    "positional_encoding",
    "norm_comparison",
    "Section",
    "format_cell",
    "format_table",
    "TableView",
    "prepare_output_dir",
    "write_report",
    "PLAIN_RECIPE",
    "measured_curves_path",
    "load_measured_curves",
    "held_out_sources",
    "score_sources",
    "training_seconds",
    "run_curve",
    "plot_time_to_quality",
    "time_to_quality_section",
    "SCALES",
    "TrainedModel",
    "find_data",
    "train_model",
    "four_sentences",
    "draw_attention",
    "evaluate_test",
    "which_heads",
    "run_demo",
    "SAMPLE_CREDIT",
    "cli_command",
    "data_credit",
    "DEFAULT_BUDGET",
    "DemoClock",
    "StageTime",
    "budget_section",
    "free_threads",
    "load_quiet_reference",
]
