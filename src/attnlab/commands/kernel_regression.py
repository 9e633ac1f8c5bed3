"""`attnlab kernel-regression`: Nadaraya–Watson attention pooling on the book's toy data.

Fit the book's 1-D regression with average pooling, fixed kernels and a learned Gaussian width;
print test MSE against the noise-free truth and save figures.
"""

from __future__ import annotations

import argparse

from attnlab.commands._common import add_figures_command, claim_figures, save_figures


def add_parser(subparsers) -> None:
    help = "Nadaraya-Watson kernel regression: MSE table, predictions and attention heatmaps"
    p = add_figures_command(subparsers, "kernel-regression", help, __doc__)
    p.add_argument("--seed", type=int, default=0, help="data and initial width (default 0)")
    p.add_argument("--bandwidth", type=float, default=1.0, help="fixed kernels' bandwidth h > 0 (default: %(default)s)")
    p.add_argument(
        "--kernels",
        default="gaussian,boxcar,epanechnikov",
        help="comma-separated fixed kernels (gaussian, boxcar, epanechnikov, triangular)",
    )
    p.add_argument("--epochs", type=int, default=5, help="SGD epochs for the learned width (1..10000)")
    p.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (> 0)")
    p.add_argument("--n-train", type=int, default=50, help="training points (2..5000)")
    p.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> list[str]:
    from attnlab.models.kernel_regression import KERNELS
    from attnlab.utils.checks import check_range, check_seed

    check_range("--bandwidth", args.bandwidth, lo=0, lo_open=True)
    check_range("--epochs", args.epochs, 1, 10_000, integer=True)
    check_range("--lr", args.lr, lo=0, lo_open=True)
    # Leave-one-out attention is an (n, n) matrix: 5000 points is 100 MB, more only waits for memory.
    check_range("--n-train", args.n_train, 2, 5_000, why=" (leave-one-out training needs 2)", integer=True)
    check_seed(args.seed)
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    valid = [k for k in KERNELS if k != "constant"]  # average pooling is always in the table
    bad = [k for k in kernels if k not in valid]
    if not kernels or bad:
        raise ValueError(f"--kernels got {bad or 'nothing'}; choose from {', '.join(valid)}")
    return kernels


def run(args: argparse.Namespace) -> int:
    from attnlab.chapter.nadaraya_watson import kernel_regression
    from attnlab.chapter.report import format_table

    kernels = _validate(args)
    claim = claim_figures(args)  # before any work: the folder is new or earlier figures (--force)
    result = kernel_regression(
        seed=args.seed, bandwidth=args.bandwidth, epochs=args.epochs, lr=args.lr, n_train=args.n_train, kernels=kernels
    )
    for headers, rows in result.tables:
        print(format_table(headers, rows))
    losses = result.data["losses"]
    print(f"\nleave-one-out MSE per epoch: {', '.join(f'{x:.4f}' for x in losses)}")
    save_figures(result, claim)
    return 0
