"""Numeric precision: what the hardware computes natively, and how training and decoding use it.

    cpu_features()                          -> {"avx2", "avx512_bf16", "avx512_vnni", ...}
    resolve_precision("auto", device)       -> PrecisionChoice(asked="auto", picked="int8", reason="...")
    autocast(choice, device)                -> context for a training step (bf16 autocast, or nothing)
    prepare_for_inference(model, "int8")    -> a copy whose nn.Linear layers are int8
    decoding_model(model, "auto", device)   -> (the model on device, converted and in eval mode, the choice made)

Every command and the Python API default to `fp32`: the same model gives the same output on every machine.
- `fp32`: plain float32; decoding on the CPU runs the linear layers on weights packed once for oneDNN
  (`attnlab.inference.packed`), which gives the same tokens faster, and a decoding step's attention, an
  encoder's short self-attention, the post-norm residual's LayerNorm and greedy's arg-max on attnlab's C
  kernels (`attnlab.kernels`), faster again (BENCHMARKS.md, "Precision").
- `bf16`: training keeps fp32 master weights and Adam state; on the CPU a bf16 copy of the model runs
  forward and backward (refreshed from the masters each step; SDPA on its math path, `bf16_attention`;
  layer norm and softmax accumulate in fp32, the loss is fp32), on CUDA autocast. Decoding casts the
  weights to bf16 once and keeps the activations bf16 from layer to layer (a decoding step's bf16
  attention runs on the C kernel in fp32, else as plain matmuls: the CPU's SDPA kernel is slow on one
  bf16 query).
- `int8`: decoding only, Transformer only, CPU only: every nn.Linear, the output projection included
  (`INT8_KEEP_FP32`), gets int8 weights with one scale per output channel (`attnlab.inference.quantize`);
  the kernel (`INT8_KERNEL`) gives every activation row (token) its own scale too (CTranslate2's recipe,
  so a sentence's output does not depend on its batch) and multiplies on `torch._int_mm`, with the
  activations quantized and the sums rescaled by C passes; `kernel="fbgemm"` is fbgemm's dynamic Linear
  (one activation scale per call), what int8 runs where the C passes cannot be built, and on a CPU without
  int8 dot products (`VNNI_FLAGS`), where `torch._int_mm` falls back to a scalar loop, many times slower than
  fp32 (BENCHMARKS.md, "Precision"). ATTNLAB_INT8_KERNEL=int_mm|fbgemm|fbgemm-tensor names the kernel instead.
- `auto`: the fastest precision this hardware computes natively and that was measured to pay on it
  (BENCHMARKS.md, "Precision"); what it picked and why goes to config.json and log.jsonl:
    decoding on a CPU with int8 dot products (AVX512-VNNI, AVX-VNNI or AMX-INT8), a Transformer -> int8
      (BLEU close to fp32's, BENCHMARKS.md);
    else a CPU with native bf16 (AVX512-BF16, AMX-BF16) or a bf16 CUDA device -> bf16;
    else fp32 (int8 with AVX2 alone, on fbgemm, and emulated bf16 measured to pay too little).
    Training: bf16 on a bf16 CUDA device or an AMX-BF16 CPU, and for the Transformer on any CPU with
    native bf16 (the bf16 compute copy of `attnlab.training.mixed`, measured to pay at the laptop preset's
    sizes with fp32's validation loss); else fp32.
  A config.json that says "auto" means this rule wherever it runs; pass fp32 to reproduce a result.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnlab.inference.packed import ONEDNN, is_float_linear, pack_linears
from attnlab.inference.quantize import INT8_KERNELS, VNNI_FLAGS, has_fbgemm, quantize_linears
from attnlab.kernels import loader

log = logging.getLogger(__name__)

TRAIN_PRECISIONS = ("auto", "fp32", "bf16")
DECODE_PRECISIONS = ("auto", "fp32", "bf16", "int8")
# CPU flags (as /proc/cpuinfo names them) that mean bf16 matmuls run natively.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Linear layers int8 leaves in float, by qualified-name suffix: none. The output projection
# (decoder.dense, about half of a decoding step's multiply-adds) is quantized too: chosen on the validation
# split, where quantizing it kept BLEU within 0.5 of fp32 (benchmarks/decoding/precision.py; BENCHMARKS.md). Under
# share_embeddings it is tied to the embeddings: int8 quantizes a copy, the embedding stays float.
INT8_KEEP_FP32: tuple[str, ...] = ()
# The int8 kernel: per-row activation scales on torch._int_mm with attnlab's C quantize/rescale passes
# (faster than fbgemm's dynamic Linear per layer at the decoder's shapes, and no batch-dependence;
# benchmarks/kernels/precision_kernels.py). Where those C passes cannot be built, int8 runs 'fbgemm' (one
# activation scale per call), which is then the faster (not under ATTNLAB_NATIVE=0).
INT8_KERNEL = "int_mm"
INT8_KERNEL_ENV = "ATTNLAB_INT8_KERNEL"  # names the kernel whatever the CPU (tests: the same on every machine)


@dataclass(frozen=True)
class PrecisionChoice:
    """What was asked, what runs, and why (saved in config.json and log.jsonl)."""

    asked: str  # 'auto', 'fp32', 'bf16' or 'int8'
    picked: str  # 'fp32', 'bf16' or 'int8'
    reason: str  # one line, e.g. "auto: this CPU has no native bf16 (avx512_bf16/amx_bf16 absent) -> fp32"

    def to_dict(self) -> dict:
        return asdict(self)


def cpu_features() -> set[str]:
    """Lower-case CPU feature names: /proc/cpuinfo `flags` where present (Linux x86), else the
    capability PyTorch's dispatcher detected (torch.backends.cpu.get_cpu_capability(), e.g. 'avx2',
    'avx512', 'avx512_bf16'?) so other systems still report something."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):  # x86 'flags', ARM 'Features'
                    return set(line.split(":", 1)[1].lower().split())
    except OSError:
        pass
    try:
        return {torch.backends.cpu.get_cpu_capability().lower()}
    except (AttributeError, RuntimeError):  # very old torch or an unknown platform: nothing known
        return set()


def native_bf16(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """(whether `device` computes bf16 natively, a short reason)."""
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        name = torch.cuda.get_device_name(device) if torch.cuda.is_available() else "no CUDA device"
        return ok, f"{name} {'supports' if ok else 'does not support'} bf16"
    if device.type != "cpu":
        return False, f"native bf16 is not detected on {device.type} devices"
    found = [f for f in NATIVE_BF16_FLAGS if f in cpu_features()]
    if found:
        return True, f"this CPU computes bf16 natively ({', '.join(found)})"
    return False, f"this CPU has no native bf16 ({'/'.join(NATIVE_BF16_FLAGS)} absent; bf16 would be emulated)"


def resolve_precision(
    name: str, device: torch.device | str = "cpu", *, training: bool = False, model_type: str = "transformer"
) -> PrecisionChoice:
    """Turn a `--precision` value into the precision that will run (for `auto`, the rule of the module
    docstring; `model_type` matters to it, since int8 decodes the Transformer only).

    Raises ValueError for an unknown name, for int8 in training, and for int8 on a non-CPU device.
    """
    allowed = TRAIN_PRECISIONS if training else DECODE_PRECISIONS
    if name not in allowed:
        what = "training" if training else "decoding"
        raise ValueError(f"unknown precision {name!r} for {what}; expected one of {', '.join(allowed)}")
    device = torch.device(device)
    if name == "auto":
        return _auto(device, training, model_type)
    if name == "int8" and device.type != "cpu":
        raise ValueError(
            f"int8 decoding runs on the CPU only (PyTorch dynamic quantization), got device "
            f"{device}; use --device cpu or --precision bf16"
        )
    if name == "bf16":
        ok, why = native_bf16(device)
        return PrecisionChoice(name, name, f"asked for bf16 ({why})")
    return PrecisionChoice(name, name, f"asked for {name}")


def _auto(device: torch.device, training: bool, model_type: str) -> PrecisionChoice:
    ok, why = native_bf16(device)
    if device.type == "cpu":
        feats = cpu_features()
        vnni = [f for f in VNNI_FLAGS if f in feats]
        if not training and vnni and model_type == "transformer":
            return PrecisionChoice("auto", "int8", f"auto: this CPU has int8 dot products ({', '.join(vnni)}) -> int8")
        if training and ok and "amx_bf16" not in feats and model_type != "transformer":
            why = f"{why}, but without AMX bf16 training is measured to pay for the Transformer only"
            ok = False
    return PrecisionChoice("auto", "bf16" if ok else "fp32", f"auto: {why} -> {'bf16' if ok else 'fp32'}")


def bf16_attention(device: torch.device | str):
    """The context a bf16 training step's attention runs in: on the CPU, SDPA restricted to its math path
    (explicit matmuls and softmax, which upcasts bf16 to fp32), because the CPU flash kernel's bf16
    backward measured several times slower than its fp32 one at a Transformer's short sentences, and slower
    than the math path (benchmarks/training/train_precision.py --attention); elsewhere nothing.
    sdpa_kernel sets process-wide flags for as long as the context is open."""
    if torch.device(device).type != "cpu":
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.MATH)


def autocast(choice: PrecisionChoice, device: torch.device | str):
    """The context a training/evaluation forward runs in: bf16 autocast (CPU or CUDA) or nothing.

    Autocast keeps the parameters (and so the optimizer state) in fp32 and runs matmuls in bf16, while
    softmax, log-softmax, layer norm and the loss stay in fp32 (autocast's fp32 op list; `sequence_loss`
    also casts the logits to fp32). On the CPU attention runs on SDPA's math path (`bf16_attention`)."""
    if choice.picked != "bf16":
        return contextlib.nullcontext()
    return _bf16_autocast(device)


@contextlib.contextmanager
def _bf16_autocast(device: torch.device | str):
    # entered by `with`, not when `autocast` is called: sdpa_kernel sets process-wide flags
    with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16), bf16_attention(device):
        yield


def int8_layers(model: nn.Module, keep_fp32: tuple[str, ...] = INT8_KEEP_FP32) -> list[str]:
    """Qualified names of the nn.Linear layers `prepare_for_inference(model, 'int8')` quantizes."""
    return [
        name
        for name, m in model.named_modules()
        if is_float_linear(m) and not any(name == k or name.endswith("." + k) for k in keep_fp32)
    ]


def prepare_for_inference(
    model: nn.Module,
    precision: str | PrecisionChoice,
    device: torch.device | str = "cpu",
    *,
    keep_fp32: tuple[str, ...] = INT8_KEEP_FP32,
    kernel: str | None = None,
) -> nn.Module:
    """A model ready to decode in `precision`, without changing the caller's weights. fp32: the model
    itself; on the CPU its nn.Linear layers become `PackedLinear`s in place (`attnlab.inference.packed`: the
    same Parameters and results, the weights reordered once for oneDNN). bf16 and int8: a converted copy.
    `keep_fp32` overrides which Linear layers int8 skips; `kernel` which int8 kernel runs ('int_mm',
    'fbgemm' or 'fbgemm-tensor', see attnlab.inference.quantize; default INT8_KERNEL).

    Raises ValueError for an unknown precision, or int8 on a model or device it does not support.
    """
    choice = precision if isinstance(precision, PrecisionChoice) else resolve_precision(precision, device)
    cpu = torch.device(device).type == "cpu"
    if choice.picked == "fp32":
        return pack_linears(model, copy=False) if cpu and ONEDNN else model
    if choice.picked == "bf16":
        return copy.deepcopy(model).to(torch.bfloat16).eval()
    # int8
    model_type = getattr(model, "MODEL_TYPE", type(model).__name__)
    if model_type != "transformer":
        raise ValueError(
            f"int8 decoding supports the Transformer only (its per-layer choice is measured), "
            f"got a {model_type} model; use --precision fp32 or bf16"
        )
    if not cpu:
        raise ValueError(f"int8 decoding runs on the CPU only, got device {device}; use --device cpu")
    names = int8_layers(model, keep_fp32)
    if not names:
        raise ValueError("int8: this model has no nn.Linear layer to quantize; use --precision fp32")
    fbgemm = has_fbgemm()
    kernel = kernel or _int8_kernel(fbgemm)
    if kernel.startswith("fbgemm") and not fbgemm:
        kernel = "int_mm"  # no fbgemm in this build (ARM): the per-row kernel runs on any CPU
    return quantize_linears(model, names, kernel)


def _int8_kernel(fbgemm: bool) -> str:
    """The int8 kernel `prepare_for_inference` runs when none is named: ATTNLAB_INT8_KERNEL where set, else
    INT8_KERNEL, unless fbgemm's is the faster here (without attnlab's C passes, or without int8 dot products)
    and ATTNLAB_NATIVE=0 did not ask for the per-row recipe on PyTorch's operators.

    Raises ValueError for an ATTNLAB_INT8_KERNEL that names no kernel."""
    named = os.environ.get(INT8_KERNEL_ENV, "").strip()
    if named:
        if named not in INT8_KERNELS:
            raise ValueError(
                f"{INT8_KERNEL_ENV}={named!r} names no int8 kernel; expected one of {', '.join(INT8_KERNELS)}"
            )
        return named
    if not fbgemm or loader.switched_off():  # ATTNLAB_NATIVE=0 keeps the per-row recipe, as it keeps every other
        return INT8_KERNEL
    if loader.load("int8_rows") is None:
        # Without its C passes the per-row kernel is slower than fbgemm's (BENCHMARKS.md, "Precision").
        log.warning("int8: attnlab's C passes are not available here, so fbgemm's dynamic Linear runs")
        return "fbgemm"
    if not any(f in cpu_features() for f in VNNI_FLAGS):
        log.info("int8: this CPU has no int8 dot products (%s), so fbgemm's dynamic Linear runs", "/".join(VNNI_FLAGS))
        return "fbgemm"
    return INT8_KERNEL


def decoding_model(
    model: nn.Module, precision: str | PrecisionChoice = "fp32", device: torch.device | str = "cpu"
) -> tuple[nn.Module, PrecisionChoice]:
    """(the model to decode with: on `device`, converted to `precision` by `prepare_for_inference`, in eval
    mode; the `PrecisionChoice` made, and why): what `load_translator` hands a `Translator`. For `auto`, the
    rule looks at the model's type too (int8 decodes the Transformer only).

    Examples:
        >>> model, choice = decoding_model(nn.Sequential(nn.Linear(4, 4)), "bf16")
        >>> choice.picked, next(model.parameters()).dtype, model.training
        ('bf16', torch.bfloat16, False)
    """
    if not isinstance(precision, PrecisionChoice):
        model_type = getattr(model, "MODEL_TYPE", type(model).__name__)
        precision = resolve_precision(precision, device, model_type=model_type)
    return prepare_for_inference(model.to(device), precision, device).eval(), precision
