"""attnlab: attention mechanisms and the Transformer, implemented correctly, fast and visibly.

The face of the package: the few entry points users call, loaded on first use (PEP 562) so that
`import attnlab` and `attnlab --help` stay light. Everything else lives in the subpackages, by role:
`attention`, `data` < `models`, `decoding` < `metrics` < `runs`, `viz` < `training` < `analysis`,
`export` < `chapter` < `serve` < `commands`.
"""

from importlib import import_module

__version__ = "0.1.0"

# name -> the module that defines it
_ENTRY_POINTS = {
    "load_translator": "attnlab.runs.loading",
    "explain": "attnlab.analysis.explanation",
    "train_run": "attnlab.training.launch",
    "resume_run": "attnlab.training.launch",
    "head_view": "attnlab.analysis.notebook",
    "model_view": "attnlab.analysis.notebook",
}


def __getattr__(name: str):
    if name in _ENTRY_POINTS:
        return getattr(import_module(_ENTRY_POINTS[name]), name)
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_ENTRY_POINTS])


__all__ = ["__version__", *_ENTRY_POINTS]
