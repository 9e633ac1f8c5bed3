"""Test accuracy on scikit-learn's 8x8 digits: attnlab's Vision Transformer (`--preset digits`) against a small
CNN and a logistic regression (scikit-learn), all trained in this run on the same fixed split.

    python benchmarks/quality/vit_digits.py                  # the full comparison (~2-3 minutes on 2 CPU cores)
    python benchmarks/quality/vit_digits.py --quick          # smoke sizes (seconds)

Settings are chosen on the validation split only (the logistic regression's C here, among a few; the ViT's
and the CNN's recipes beforehand, see BENCHMARKS.md); the test split is scored once per model, at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result
from torch import nn

from attnlab.data.images import ImageData, load_digits_data
from attnlab.inference.precision import cpu_features
from attnlab.models import ViT, ViTConfig
from attnlab.training.config import TrainConfig
from attnlab.training.presets import get_preset
from attnlab.training.tasks import IMAGES, accuracy
from attnlab.training.trainer import Trainer
from attnlab.utils.runtime import seed_everything


class SmallCNN(nn.Module):
    """Two 3x3 convolutions, max-pooling, one linear layer: (B, 1, 8, 8) -> (B, 10)."""

    def __init__(self, classes: int = 10, width: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.head = nn.Linear(2 * width * 4 * 4, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (B, 2w, 4, 4)
        return self.head(x.flatten(1))


def train_cnn(data: ImageData, epochs: int, seed: int) -> tuple[nn.Module, float]:
    seed_everything(seed)
    model = SmallCNN(len(data.classes))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        order = np.random.default_rng([seed, epoch]).permutation(len(data.train))
        for i in range(0, len(order), 64):
            idx = order[i : i + 64]
            loss = F.cross_entropy(
                model(torch.from_numpy(data.train.images[idx])), torch.from_numpy(data.train.labels[idx])
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, time.perf_counter() - start


def logistic_regression(data: ImageData, cs: list[float]):
    """The C with the best validation accuracy; returns (model, C, seconds, valid accuracy)."""
    from sklearn.linear_model import LogisticRegression

    flat = lambda s: s.images.reshape(len(s), -1)
    best = None
    start = time.perf_counter()
    for c in cs:
        clf = LogisticRegression(C=c, max_iter=2000).fit(flat(data.train), data.train.labels)
        acc = float((clf.predict(flat(data.valid)) == data.valid.labels).mean())
        if best is None or acc > best[2]:
            best = (clf, c, acc)
    assert best is not None
    return best[0], best[1], time.perf_counter() - start, best[2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke sizes: a few epochs each")
    ap.add_argument("--preset", default="digits", help="the ViT preset (default digits)")
    ap.add_argument("--cnn-epochs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print("command: python benchmarks/quality/vit_digits.py " + " ".join(sys.argv[1:] if argv is None else argv))
    simd = sorted(f for f in cpu_features() if f.startswith(("avx", "amx", "sse4")))
    print(f"torch {torch.__version__}, {args.threads} thread(s), CPU features: {' '.join(simd) or '-'}")

    data = load_digits_data()
    print(f"digits: {len(data.train)} train / {len(data.valid)} valid / {len(data.test)} test images (fixed split)")
    spec = get_preset("vit", args.preset)
    train = {**spec["train"], "seed": args.seed, "threads": args.threads}
    if args.quick:
        train.update(epochs=2, time_budget=None)
    seed_everything(args.seed)
    vit = ViT(ViTConfig.from_dict(IMAGES.sized(spec["model"], data)))
    vit_result = Trainer(vit, data, TrainConfig.from_dict(train), None, progress=False, task=IMAGES).fit()
    cnn, cnn_s = train_cnn(data, 2 if args.quick else args.cnn_epochs, args.seed)
    logreg, c, lr_s, lr_valid = logistic_regression(data, [1.0] if args.quick else [0.01, 0.1, 1.0, 10.0, 100.0])

    flat = data.test.images.reshape(len(data.test), -1)
    rows = [
        (
            f"ViT ({args.preset})",
            sum(p.numel() for p in vit.parameters()),
            f"{vit_result.seconds:.1f}",
            f"{accuracy(vit, data.valid):.3f}",
            accuracy(vit, data.test),
        ),
        (
            "small CNN",
            sum(p.numel() for p in cnn.parameters()),
            f"{cnn_s:.1f}",
            f"{accuracy(cnn, data.valid):.3f}",
            accuracy(cnn, data.test),
        ),
        (
            f"logistic regression (C={c:g})",
            logreg.coef_.size + logreg.intercept_.size,
            f"{lr_s:.1f}",
            f"{lr_valid:.3f}",
            float((logreg.predict(flat) == data.test.labels).mean()),
        ),
    ]
    print(
        table(
            ["model", "parameters", "train s", "valid accuracy", "test accuracy"],
            [(*r[:4], f"{r[4]:.3f}") for r in rows],
        )
    )
    vit_test = rows[0][4]
    for name, *_, test in rows[1:]:
        print(f"ratio: ViT / {name.split(' (')[0]} = {vit_test / max(test, 1e-9):.3f}x test accuracy")
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
