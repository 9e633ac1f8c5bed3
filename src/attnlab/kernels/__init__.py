"""attnlab's C passes (`src/attnlab/csrc`) and its Triton kernel: the loader (build, cache, verify) and one
wrapper module per kernel, all in one shape (CTranslate2's `src/ops/`): `SIGNATURES` (each C symbol's ctypes
argument types; the Triton kernel's parameters), `native_<op>` (the fast pass, or None/False where it does not
run) and `<op>` (what callers run: the fast pass where it runs, its PyTorch fallback elsewhere).

    loader        build at first use, cache under ~/.cache/attnlab/native, verify, load; `off()`, `status(name)`
    switches      `Switch` (a fast path on/off), ATTNLAB_NATIVE as a boolean, `fingerprint()` of what is on
    libc          the C library's calls (prctl for worker processes, malloc_trim for the server)
    few_queries   a decoding step's attention          few_queries, native_few_queries
    finite        whether tensors hold only finite     all_finite, native_all_finite
    copy_rows     the KV cache's strided row copy      copy_rows, native_copy_rows
    gather_rows   the KV cache's rows by index         gather_rows, native_gather_rows
    argmax        greedy's pick                        pick, native_pick
    beam_topk     beam search's best 2K candidates     beam_candidates, native_beam_candidates; top_logits (sampling),
                                                       constrained_candidates (a banned token, each row's best)
    deal          constrained beam search's dealing    deal, native_deal
    sample        sampling's top-k draw                sample_top_k, native_sample_top_k
    layer_norm    LayerNorm(x + y)                     add_layer_norm, native_add_layer_norm
    int8_rows     int8 matmuls' quantize and rescale   int8_linear, native_int8_linear
    int8_step     int8's fused decoding step's passes  native_int8_step (the step: `attnlab.inference.int8_step`,
                                                       whose fallback is the model's own modules)
    flash         FlashAttention in Triton             flash, native_flash (the kernel: flash_triton)

Triton is an extra (`attnlab[kernels]`): `flash` imports it on first use, so importing attnlab never needs it;
without it `flash` runs PyTorch's SDPA. ctypes is imported in this package only. The package imports nothing
else of attnlab: attention, inference, models and decoding call it.
"""

from .argmax import native_pick, pick
from .beam_topk import beam_candidates, constrained_candidates, native_beam_candidates, top_logits
from .copy_rows import copy_rows, native_copy_rows
from .deal import deal, native_deal
from .few_queries import few_queries, native_few_queries
from .finite import all_finite, native_all_finite
from .flash import flash, native_flash
from .gather_rows import gather_rows, native_gather_rows
from .int8_rows import int8_linear, native_int8_linear
from .int8_step import native_int8_step
from .layer_norm import add_layer_norm, native_add_layer_norm
from .loader import KERNELS, active, off, status
from .sample import native_sample_top_k, sample_top_k
from .switches import Switch, fingerprint, native_enabled

__all__ = [
    "KERNELS",
    "Switch",
    "active",
    "add_layer_norm",
    "all_finite",
    "beam_candidates",
    "constrained_candidates",
    "copy_rows",
    "deal",
    "few_queries",
    "fingerprint",
    "flash",
    "gather_rows",
    "int8_linear",
    "native_add_layer_norm",
    "native_all_finite",
    "native_beam_candidates",
    "native_copy_rows",
    "native_deal",
    "native_enabled",
    "native_few_queries",
    "native_flash",
    "native_gather_rows",
    "native_int8_linear",
    "native_int8_step",
    "native_pick",
    "native_sample_top_k",
    "off",
    "pick",
    "sample_top_k",
    "status",
    "top_logits",
]
