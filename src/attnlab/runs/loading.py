"""`load_translator`: a run folder (or a checkpoint of it) -> a `Translator` ready to decode: the one
way in for the CLI, the demo, the explorer and notebooks; `load_model`: the model of a run of any type
(a Vision Transformer's too). Config, vocabularies and weights are checked against each other before a
single parameter is allocated; `open_translator`: `load_translator` for a command, saying how to make a
missing run and what `--precision auto` chose.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from attnlab.data import Example, TranslationData, load_data, load_vocab
from attnlab.decoding.translator import Translator, model_max_len
from attnlab.inference.precision import decoding_model
from attnlab.models import TRANSLATORS, build_model
from attnlab.runs.alignment import read_alignment
from attnlab.runs.checkpoints import list_checkpoints
from attnlab.runs.config import read_run_config
from attnlab.runs.generation import read_generation
from attnlab.runs.layout import CONFIG_FILE, DEFAULT_RUN, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE
from attnlab.runs.weights import check_config_size, check_weights, config_floats, load_weights
from attnlab.utils.runtime import resolve_device


# --------------------------------------------------------------------------- loading a translator
def load_translator(
    run_dir: str | os.PathLike = DEFAULT_RUN,
    device: str | torch.device = "cpu",
    weights: str | os.PathLike | None = None,
    precision: str = "fp32",
) -> Translator:
    """Rebuild the model of a run folder and load its final weights (or `weights`: a checkpoint
    folder or an averaged .safetensors file), prepared to decode in `precision` ('auto', 'fp32',
    'bf16', 'int8'; see attnlab.inference.precision); `translator.precision` says what runs and why.

    The translator decodes with the run's generation.json (`attnlab.runs.generation`) unless a call gives
    options. Raises FileNotFoundError naming a missing file, ValueError when config, vocabularies and
    weights disagree.
    """

    if not isinstance(device, torch.device):
        device = resolve_device(device)  # a bad --device is one clear line before any file is read

    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    defaults = read_generation(run_dir)  # the run's decoding defaults (generation.json), checked up front
    if cfg["model_type"] not in TRANSLATORS:
        raise ValueError(
            f"{run_dir} is a {cfg['model_type']} run, not a translator; `attnlab evaluate` and "
            f"`attnlab attention --image N` take it"
        )
    for name in (SRC_VOCAB_FILE, TGT_VOCAB_FILE):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir / name} is missing: the run folder lacks its vocabulary {name}")
    src_vocab, tgt_vocab = load_vocab(run_dir / SRC_VOCAB_FILE), load_vocab(run_dir / TGT_VOCAB_FILE)
    model_cfg = cfg["model"]
    for side, vocab, fname in (("src", src_vocab, SRC_VOCAB_FILE), ("tgt", tgt_vocab, TGT_VOCAB_FILE)):
        size = model_cfg.get(f"{side}_vocab_size")
        if size is not None and size != len(vocab):
            raise ValueError(
                f"{run_dir / CONFIG_FILE} says {side}_vocab_size={size} but {run_dir / fname} holds "
                f"{len(vocab)} tokens; the files come from different runs"
            )
    # The inference package converts (precision, packing, int8); the translator holds what it is given.
    model, choice = decoding_model(_load_model(run_dir, cfg, weights), precision, device)
    translator = Translator(
        model, src_vocab, tgt_vocab, cfg, device=device, max_len=model_max_len(cfg), precision=choice,
        defaults=defaults,
    )  # fmt: skip
    translator.alignment = read_alignment(run_dir)  # `attnlab heads`' choice: the default of align
    return translator


def open_translator(
    run_dir: str | os.PathLike = DEFAULT_RUN,
    device: str | torch.device = "cpu",
    weights: str | os.PathLike | None = None,
    precision: str = "fp32",
    say: Callable[[str], None] | None = None,
) -> Translator:
    """`load_translator` as a command opens a run: a missing folder says how to make one, and `say` (default:
    a line on stderr) is told what `precision="auto"` chose on this machine, and why."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise FileNotFoundError(
            f"no trained model at {run_dir}; make one with `attnlab demo` (writes {DEFAULT_RUN}) or "
            f"`attnlab train --model transformer --preset d2l --out {run_dir}`"
        )
    translator = load_translator(run_dir, device=device, weights=weights, precision=precision)
    if translator.precision.asked == "auto":
        (say or _stderr)(f"attnlab: --precision {translator.precision.reason}")
    return translator


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def load_model(
    run_dir: str | os.PathLike,
    device: str | torch.device = "cpu",
    weights: str | os.PathLike | None = None,
) -> tuple[Any, dict]:
    """(the model of any run folder with its final weights, or `weights`, in eval mode on `device`; its
    config.json): the one loader of every model type (`load_translator` adds the vocabularies to a
    translator's). Raises FileNotFoundError naming a missing file, ValueError when config and weights disagree.

        model, cfg = load_model("runs/vit")    # a ViT run: cfg["model_type"] == "vit", model in eval mode
    """
    if not isinstance(device, torch.device):
        device = resolve_device(device)
    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    return _load_model(run_dir, cfg, weights).to(device).eval(), cfg


SKELETON_BYTES = 256 << 20  # a model past this is checked against its weights' header before it is built


def _load_model(run_dir: Path, cfg: dict, weights: str | os.PathLike | None) -> Any:
    """The run's model with its weights (final, or `weights`: a checkpoint folder or a .safetensors file)."""
    model_cfg = cfg["model"]
    # Its numbers first (building even on the meta device takes time per layer and table row), then, for a
    # config past SKELETON_BYTES, built on the meta device: one that asks for gigabytes (a hand-edited
    # ffn_num_hiddens) is compared with the weights' header before a single parameter is allocated. A smaller
    # one is built and compared at once: PyTorch's factories on the meta device import torch._dynamo on first
    # use, a second of every command that loads a model.
    check_config_size(cfg["model_type"], model_cfg, 4, str(run_dir / CONFIG_FILE))
    skeleton = None
    if config_floats(model_cfg) * 4 > SKELETON_BYTES:
        with torch.device("meta"):
            skeleton = build_model(cfg["model_type"], model_cfg)
    if weights is None:
        weights_path = run_dir / WEIGHTS_FILE
        if not weights_path.is_file():
            ckpts = list_checkpoints(run_dir)
            hint = (
                (
                    f"; the run has checkpoints (latest {ckpts[-1].name}): resume it with "
                    f"`attnlab train --resume {run_dir}` or pass that checkpoint"
                )
                if ckpts
                else ""
            )
            raise FileNotFoundError(
                f"{weights_path} is missing: the run folder has no final weights {WEIGHTS_FILE}{hint}"
            )
    else:
        weights_path = Path(weights)
        if weights_path.is_dir():
            weights_path = weights_path / WEIGHTS_FILE
    extra = " and its vocabularies" if cfg["model_type"] in TRANSLATORS else ""
    what = f"{run_dir / CONFIG_FILE}{extra}"
    if skeleton is not None:
        check_weights(skeleton, weights_path, what, config=model_cfg)
    model = build_model(cfg["model_type"], model_cfg)
    if skeleton is None:
        check_weights(model, weights_path, what, config=model_cfg)
    load_weights(model, weights_path, what)
    return model


# --------------------------------------------------------------------------- data for imported runs
def imported_source(config: Mapping[str, Any]) -> str | None:
    """The folder an imported run came from (`attnlab import hf`), or None for a run attnlab trained."""
    data = config.get("data") or {}
    return str(data.get("hf_source", "a Hugging Face model")) if data.get("source") == "hf" else None


class _Encoded(Sequence):
    """A corpus split's examples with ids from a run's own vocabularies, encoded when read."""

    def __init__(self, examples: Sequence[Example], src_vocab, tgt_vocab):
        self.examples, self.src_vocab, self.tgt_vocab = examples, src_vocab, tgt_vocab

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        ex = self.examples[i]
        return Example(self.src_vocab.encode(ex.src_text), self.tgt_vocab.encode(ex.tgt_text), ex.src_text, ex.tgt_text)


def load_imported_data(translator: Translator, run_dir: str | os.PathLike, data_path: str | None) -> TranslationData:
    """The splits of the corpus `data_path` (split as `attnlab train --data` splits it by default) with
    ids from an imported run's own vocabularies: an imported run has no training data of its own, and
    its SentencePiece vocabularies are not the ones a corpus would build.

    Raises ValueError saying to pass --data when `data_path` is None.
    """
    source = imported_source(translator.config)
    if not data_path:
        raise ValueError(
            f"{run_dir} was imported from {source} and has no data of its own; pass --data PATH (a corpus "
            f"such as fra-eng.zip, a TSV of source<TAB>target lines, or a folder from `attnlab prepare`)"
        )
    data = load_data({"path": str(data_path)})
    src, tgt = translator.src_vocab, translator.tgt_vocab
    train, valid, test = (_Encoded(getattr(data, name), src, tgt) for name in ("train", "valid", "test"))
    settings = {**data.settings, "vocabularies": f"{run_dir} (imported from {source})"}
    return TranslationData(src, tgt, train, valid, test, stats=dict(data.stats), settings=settings)
