"""Translation: pairs of token sequences, cross-entropy over the real target tokens, validation BLEU
(the Transformer, the Bahdanau encoder–decoder and the decoder-only translator)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from attnlab.data import check_data_config, check_prepared_overrides, collate, load_data, load_vocab, plan_batches
from attnlab.models import CONFIGS, TRANSLATORS
from attnlab.runs.config import write_run_config
from attnlab.runs.layout import CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE
from attnlab.training.loss import sequence_loss, target_mask
from attnlab.training.tasks.base import Task
from attnlab.training.validation import validation_scores


def check_model_config(model_type: str, model_config: Mapping[str, Any]) -> None:
    """Validate a model config before the data gives the vocabulary sizes (placeholders stand in)."""

    if model_type not in CONFIGS:
        raise ValueError(f"unknown model type {model_type!r}; expected one of {sorted(CONFIGS)}")
    CONFIGS[model_type].from_dict({"src_vocab_size": 1, "tgt_vocab_size": 1, **model_config})


def batch_options(cfg) -> dict:
    """A TrainConfig's batch options (batch_tokens / batch_size / num_steps), the ones it sets."""
    opts = dict(batch_tokens=cfg.batch_tokens, batch_size=cfg.batch_size, num_steps=cfg.num_steps)
    return {k: v for k, v in opts.items() if v is not None}


def _skips_padding(model: nn.Module) -> bool:
    # Models whose forward can skip the padded target positions (the Transformer) are asked to.
    return "targets_mask" in inspect.signature(model.forward).parameters


class TranslationTask(Task):
    """Source/target pairs of a corpus (`attnlab.data.load_data`), batched by tokens or sentences."""

    name = "translation"
    model_types = TRANSLATORS
    metric = "valid_bleu"
    metric_label, metric_format, unit = "valid BLEU", ".2f", "tokens"

    def check(self, model_type, model_config, data_config, train_seed, asked=None, names=None) -> dict:
        data = dict(data_config)
        if data.get("loader", "translation") == "translation":
            data.setdefault("seed", train_seed)  # the split follows --seed unless fixed
        check_model_config(model_type, model_config)
        check_data_config(data)
        # A prepared folder fixed its data settings: one asked for must agree with them.
        check_prepared_overrides(data.get("path"), asked or {}, names)
        return data

    def load(self, data_config):
        return load_data(data_config)

    def recorded(self, data_config, data) -> dict:
        # The resolved file, so `evaluate` rebuilds the same test split without --data.
        return {**data_config, "path": data.settings.get("data_path", data_config.get("path"))}

    def sized(self, model_config, data) -> dict:
        return {**model_config, "src_vocab_size": len(data.src_vocab), "tgt_vocab_size": len(data.tgt_vocab)}

    def write_run(self, run_dir, model_type, model, train, data_config, data) -> None:
        write_run_config(
            run_dir, model_type, model, train, data_config, src_vocab=data.src_vocab, tgt_vocab=data.tgt_vocab
        )

    def check_rebuilt(self, run_dir: str | os.PathLike, cfg, data) -> None:
        run_dir = Path(run_dir)
        for side, fname in (("src", SRC_VOCAB_FILE), ("tgt", TGT_VOCAB_FILE)):
            if load_vocab(run_dir / fname) != getattr(data, f"{side}_vocab"):
                raise ValueError(
                    f"the data rebuilt from {run_dir / CONFIG_FILE} gives a different {side} "
                    f"vocabulary than {run_dir / fname}; was the data file changed?"
                )

    def moved(self, data_config, data_path: str) -> dict:
        return {**data_config, "path": data_path}

    def plan(self, split, cfg, epoch, rank, world_size):
        return plan_batches(
            split, shuffle=True, seed=cfg.seed, epoch=epoch, rank=rank, world_size=world_size, **batch_options(cfg)
        )

    def collate(self, data, split, indices, cfg):
        return collate(split, indices, data.src_vocab, data.tgt_vocab, cfg.num_steps)

    def units(self, batch) -> int:
        return int(batch.num_tokens)

    def loss(self, model: nn.Module, batch, label_smoothing: float) -> Tensor:
        inner: nn.Module = getattr(model, "module", model)  # DistributedDataParallel passes the arguments on
        if _skips_padding(inner):  # logits of the real target positions only, (N, V)
            real = target_mask(batch.tgt_valid_lens, batch.tgt_in.shape[1])
            logits = model(batch.src, batch.tgt_in, batch.src_valid_lens, targets_mask=real)
        else:
            logits = model(batch.src, batch.tgt_in, batch.src_valid_lens)
        return sequence_loss(logits, batch.tgt_out, batch.tgt_valid_lens, label_smoothing)[0]

    def evaluate(self, model, data, examples, cfg, device, autocast, batching) -> dict:
        return validation_scores(model, data, examples, cfg, device, autocast, batching)


TRANSLATION = TranslationTask()
