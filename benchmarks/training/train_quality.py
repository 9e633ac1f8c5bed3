"""Validation loss after the same steps, per training precision (also `train_throughput.py --quality STEPS`).

The cpu-small recipe at D=64 trains from one seed for STEPS updates on the real corpus ($ATTNLAB_DATA) once
per precision (same batches), through attnlab's Trainer, and its teacher-forced validation loss is compared
with fp32's.

    flock /tmp/attnlab-measure.lock python benchmarks/training/train_quality.py --steps 40 --precision fp32,bf16
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result

from attnlab.data import load_data
from attnlab.models import build_model
from attnlab.training.config import TrainConfig
from attnlab.training.presets import get_preset
from attnlab.training.trainer import Trainer
from attnlab.utils.runtime import seed_everything


def quality(steps: int, precisions: list[str], width: int = 64) -> str:
    """Same seed, same batches, `steps` updates per precision on the real corpus; validation loss of each.
    `width` is D (the FFN is 2D)."""
    preset = get_preset("transformer", "cpu-small")
    data = load_data({**preset["data"], "seed": 0})
    model_cfg = {
        **preset["model"],
        "num_hiddens": width,
        "ffn_num_hiddens": 2 * width,
        "src_vocab_size": len(data.src_vocab),
        "tgt_vocab_size": len(data.tgt_vocab),
    }
    losses, rows = {}, []
    for p in precisions:
        seed_everything(0)
        model = build_model("transformer", model_cfg)
        cfg = TrainConfig.from_dict(
            {
                **preset["train"],
                "time_budget": None,
                "max_steps": steps,
                "precision": p,
                "eval_limit": 1,
                "checkpoint_every": 0,
                "device": "cpu",
            }
        )
        trainer = Trainer(model, data, cfg, None, progress=False)
        t0 = time.perf_counter()
        trainer.fit()
        seconds = time.perf_counter() - t0
        losses[p] = trainer.evaluate()["valid_loss"]  # teacher-forced, under the same autocast as training
        change = f"{100 * (losses[p] / losses['fp32'] - 1):+.2f}%"
        rows.append([p, width, steps, f"{losses[p]:.4f}", "baseline" if p == "fp32" else change, f"{seconds:.0f}"])
    heads = ["precision", "D", "steps", "validation loss", "vs fp32", "training s"]
    caption = f"cpu-small recipe at D={width}, seed 0, same batches, {len(data.valid)} validation sentences"
    return f"\n## quality: {caption} (target: within 2%)\n" + table(heads, rows, caption=caption)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--precision", default="fp32,bf16", help="the first is the baseline: fp32,...")
    ap.add_argument("--d", type=int, default=64, help="model width D (FFN 2D)")
    args = ap.parse_args(argv)
    precisions = [p for p in args.precision.split(",") if p]
    if not precisions or precisions[0] != "fp32":
        raise SystemExit(f"--precision must start with fp32 (the baseline), got {args.precision!r}")
    print(f"command: python benchmarks/training/train_quality.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(quality(args.steps, precisions, args.d))
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
