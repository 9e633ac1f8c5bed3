"""Self-attention and positional encoding: the sinusoids, the binary-counting analogy, and why
PE(pos + k) is a fixed rotation M_k of PE(pos).
"""

from __future__ import annotations

import torch

from attnlab.attention import PositionalEncoding
from attnlab.chapter.result import ChapterResult
from attnlab.viz.plots import plot_positional_encoding, plot_positional_heatmap


# --------------------------------------------------------------------------- positional encoding
def sinusoid_reference(num_steps: int, num_hiddens: int) -> torch.Tensor:
    """The paper's formula in float64, written independently of attnlab.attention. (L, D)"""
    pos = torch.arange(num_steps, dtype=torch.float64)[:, None]
    i = torch.arange(0, num_hiddens, 2, dtype=torch.float64)
    angles = pos / 10000 ** (i / num_hiddens)
    P = torch.zeros(num_steps, num_hiddens, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
    return P


def rotation_matrix(k: int, num_hiddens: int) -> torch.Tensor:
    """M_k (D, D), block-diagonal, with PE(pos + k) = M_k PE(pos) for every pos.

    For frequency w_j the pair (sin(w_j p), cos(w_j p)) moves to (sin(w_j (p+k)), cos(w_j (p+k)))
    by the 2x2 rotation [[cos w_j k, sin w_j k], [-sin w_j k, cos w_j k]] — which depends on the
    offset k but not on p: relative positions are linear functions of absolute ones.
    """
    if num_hiddens % 2:
        raise ValueError(f"the rotation property needs an even num_hiddens, got {num_hiddens}")
    w = 1 / 10000 ** (torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens)
    c, s = torch.cos(w * k), torch.sin(w * k)
    M = torch.zeros(num_hiddens, num_hiddens, dtype=torch.float64)
    idx = torch.arange(0, num_hiddens, 2)
    M[idx, idx], M[idx, idx + 1] = c, s
    M[idx + 1, idx], M[idx + 1, idx + 1] = -s, c
    return M


def positional_encoding(num_hiddens: int = 32, num_steps: int = 60) -> ChapterResult:
    """Plot the encoding, print the binary analogy, and check the rotation property numerically.

    The table comes from `attnlab.attention.PositionalEncoding` (the model's own module, fed zeros
    in eval mode so the output *is* the encoding), so this checks the code the Transformer runs.
    """

    if num_hiddens < 2 or num_hiddens % 2:
        raise ValueError(f"num_hiddens must be an even number >= 2 (sin/cos pairs), got {num_hiddens}")
    if num_steps < 2:
        raise ValueError(f"num_steps must be >= 2 to compare shifted positions, got {num_steps}")
    pe = PositionalEncoding(num_hiddens, dropout=0.0, max_len=num_steps).eval()
    with torch.no_grad():
        P = pe(torch.zeros(1, num_steps, num_hiddens))[0]  # (L, D)
    P64 = P.double()
    formula_err = float((P64 - sinusoid_reference(num_steps, num_hiddens)).abs().max())
    # Every shift k and every position pos with pos + k < L: compare PE(pos+k) with M_k PE(pos).
    rot_err = max(
        float((P64[k:] - P64[:-k] @ rotation_matrix(k, num_hiddens).T).abs().max()) for k in range(1, num_steps)
    )

    columns = list(range(6, 10)) if num_hiddens >= 10 else list(range(min(4, num_hiddens)))
    # Binary analogy: bit b flips every 2^b numbers, like sin columns of falling frequency.
    bits = min(3, (num_hiddens + 1) // 2)
    cols = [2 * b for b in range(bits)]
    n = min(8, num_steps)
    table_rows = [[p, f"{p:03b}"] + [round(float(P[p, c]), 2) for c in cols] for p in range(n)]
    pre = "\n".join(f"{p} in binary is {p:03b}" for p in range(8))
    paragraph = (
        f"The sinusoidal encoding (num_hiddens={num_hiddens}, {num_steps} positions) matches the "
        f"paper's formula to {formula_err:.1e}. Like the bits of a binary counter, whose higher "
        f"bits flip less often, higher encoding columns oscillate at lower frequencies. Shifting "
        f"by k positions is a fixed block-diagonal rotation M_k, the same for every position: over "
        f"all shifts 1..{num_steps - 1} and all positions, max |PE(pos+k) - M_k PE(pos)| = "
        f"{rot_err:.1e}, which is why attention can learn to use relative positions."
    )
    return ChapterResult(
        "Positional encoding",
        paragraph,
        tables=[
            (["pos", "binary"] + [f"col {c}" for c in cols], table_rows),
            (["check", "max abs error"], [["PE == formula", formula_err], ["PE(pos+k) == M_k PE(pos)", rot_err]]),
        ],
        figures={"pe_columns": plot_positional_encoding(P, columns), "pe_heatmap": plot_positional_heatmap(P)},
        pre=pre,
        data={"P": P, "formula_max_error": formula_err, "rotation_max_error": rot_err},
    )
