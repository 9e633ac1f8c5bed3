"""bf16 training on the CPU: a bf16 compute copy of the model, fp32 master weights in the optimizer.

    master model (fp32: what the optimizer, clipping, checkpoints and validation see)
      -> refresh(): its weights copied into the bf16 compute model, once per step (one foreach copy)
      -> forward + backward of the compute model, bf16 end to end (`bf16_attention`: SDPA's math path;
         layer norm and softmax accumulate in fp32 inside their bf16 kernels; the loss is fp32)
      -> grads_to_masters(): the bf16 gradients become the fp32 masters' .grad; Adam runs in fp32

Autocast does the same arithmetic in its matmuls, but casts every activation and weight gradient
around every op, and computes layer norm and softmax in fp32 tensors that the next matmul casts back;
at the `laptop` preset's sizes on an AVX512-BF16 CPU the compute copy's step is faster
(benchmarks/training/train_throughput.py; BENCHMARKS.md, "Training precision").
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from attnlab.inference.precision import PrecisionChoice

# Models the compute copy is measured on; the others (Bahdanau's GRUs) train under autocast.
COMPUTE_COPY_MODELS = ("transformer",)


class Bf16Compute:
    """A bf16 copy of `master` that runs forward and backward; `master` keeps the fp32 weights.

    Tied parameters stay tied in the copy (one bf16 tensor per master parameter). Buffers (sinusoid
    tables) are bf16 in the copy, as `prepare_for_inference(model, 'bf16')` makes them.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> master = nn.Linear(4, 2)
        >>> mixed = Bf16Compute(master)
        >>> mixed.refresh()
        >>> mixed.model(torch.randn(3, 4, dtype=torch.bfloat16)).float().sum().backward()
        >>> mixed.grads_to_masters()
        >>> master.weight.grad.dtype, mixed.model.weight.dtype
        (torch.float32, torch.bfloat16)
    """

    def __init__(self, master: nn.Module):
        self.master = master
        self.model = copy.deepcopy(master).to(torch.bfloat16)
        # parameters() lists each tied tensor once, in the same order in the deep copy.
        self._masters: list[torch.Tensor] = list(master.parameters())
        self._copies: list[torch.Tensor] = list(self.model.parameters())
        if len(self._masters) != len(self._copies):
            raise ValueError("the bf16 copy has other parameters than its master; train it under autocast")

    def refresh(self) -> None:
        """Copy the master weights into the compute copy and drop its gradients (start of a step).

        Done every step rather than after each update, so a resumed or reloaded master is always what runs.
        """
        with torch.no_grad():
            torch._foreach_copy_(self._copies, self._masters)
        for p in self._copies:
            p.grad = None

    def grads_to_masters(self) -> None:
        """The compute copy's bf16 gradients, as fp32, become the masters' .grad (None stays None)."""
        for m, c in zip(self._masters, self._copies):
            m.grad = None if c.grad is None else c.grad.float()


def compute_copy(
    model: nn.Module, choice: PrecisionChoice, device: torch.device, world_size: int
) -> Bf16Compute | None:
    """The bf16 compute copy the Trainer runs, or None where it trains `model` itself (fp32; bf16 under
    autocast on CUDA, in multi-process runs, and for models outside COMPUTE_COPY_MODELS)."""
    if choice.picked != "bf16" or device.type != "cpu" or world_size > 1:
        return None
    if getattr(model, "MODEL_TYPE", None) not in COMPUTE_COPY_MODELS:
        return None
    return Bf16Compute(model)
