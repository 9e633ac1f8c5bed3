"""Multi-head attention: fused SDPA by default, explicit weights when recorded, a key/value cache for
decoding, and local (sliding-window) attention whose memory grows linearly with sequence length."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.inference.packed import is_float_linear, linear
from attnlab.kernels.few_queries import decoding_on_cpu, few_queries_attention, native_few_queries, whole_lengths
from attnlab.kernels.finite import all_finite

from .backends import masked_attention, sdpa_masked
from .cache import KVCache
from .dropout import Dropout
from .heads import active_head_mask, check_head_mask, prune_projections
from .local import local_blockwise
from .masking import build_mask, window_mask
from .positions.rope import RotaryEmbedding
from .projections import concatenated, concatenated_weight
from .recording import Recordable
from .scoring import attend, check_qkv
from .steps import fold_beams, unfold_beams

# A relative position bias: (query positions (Lq,), key positions (Lk,)) -> float (1|B, H, Lq, Lk)
# added to the scaled scores (`attnlab.attention.positions`: ALiBi, T5).
PositionBias = Callable[[Tensor, Tensor], Tensor]


class MultiHeadAttention(Recordable, nn.Module):
    """Multi-head attention with the book's projections W_q, W_k, W_v, W_o (so weights copy to and from
    `torch.nn.MultiheadAttention`).

    Self-attention (`queries is keys is values`) projects Q, K and V with one matmul against the three
    weights concatenated at call time: the parameters stay the book's four `nn.Linear`s.

    Args:
        num_hiddens: model size D; each of the H heads works on D / H features.
        num_heads: H.
        dropout: dropout on the attention weights (training only).
        bias: whether the four projections have biases.
        window: if set, each query sees only keys within this distance (local attention).
        causal: default for `forward(causal=None)`: query i sees keys <= i.
        block_size: query block of the blockwise local-attention path.
        num_kv_heads: Hkv key/value heads shared by groups of H / Hkv query heads (grouped-query
            attention; 1 = multi-query); None = H. W_k and W_v map D to Hkv * Dh and a KV cache holds
            Hkv heads.
        rotary: a `RotaryEmbedding` applied to q and k after projection (self-attention; positions
            continue from the cache's length while decoding).

    `forward(..., position_bias=f)` adds f(query positions, key positions), (1, H, Lq, Lk), to the
    scaled scores (ALiBi, T5; see `attnlab.attention.positions`); queries are the last Lq of the Lk
    positions, as for the causal mask.

    Shape:
        queries (B, Lq, D), keys (B, Lk, D), values (B, Lk, D) -> (B, Lq, D).
        valid_lens (B,) or (B, Lq); mask bool (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk), True = may attend.
        head_mask (H,): a gate multiplying each head's output before W_o (0 = head off).

    Non-finite inputs (the same on the fused and the recorded path): masked (hidden) keys and values
    never influence an output, whatever they hold. Output row i of head h is NaN exactly when query i,
    or a key or value visible to query i, is non-finite (NaN or inf); every other row is exact. A query
    that sees no key at all gives zeros, as with finite inputs.

    After `prune_heads`, H is smaller but each head keeps its size Dh, so the projections map D to H * Dh;
    `kept_heads` names the original heads left (a position bias computed for all of them is cut to
    those). With grouped-query attention only whole groups can be pruned (their KV head goes too).

    Examples:
        >>> import torch
        >>> mha = MultiHeadAttention(num_hiddens=8, num_heads=2).eval()
        >>> x = torch.randn(2, 5, 8)
        >>> mha(x, x, x, valid_lens=torch.tensor([5, 3])).shape
        torch.Size([2, 5, 8])
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        window: int | None = None,
        causal: bool = False,
        block_size: int = 256,
        num_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
    ):
        super().__init__()
        if num_hiddens <= 0 or num_heads <= 0 or num_hiddens % num_heads:
            raise ValueError(
                f"num_hiddens must be a positive multiple of num_heads, got num_hiddens={num_hiddens}, "
                f"num_heads={num_heads}; pick num_heads dividing num_hiddens"
            )
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if not isinstance(kv, int) or not 1 <= kv <= num_heads or num_heads % kv:
            raise ValueError(
                f"num_kv_heads must divide num_heads={num_heads} (1 = multi-query, {num_heads} = multi-head), "
                f"got {num_kv_heads!r}"
            )
        if window is not None and window < 0:
            raise ValueError(f"window must be a non-negative number of positions or None, got {window}")
        self.num_hiddens, self.num_heads, self.num_kv_heads = num_hiddens, num_heads, kv
        self.head_dim = num_hiddens // num_heads
        self.kept_heads = list(range(num_heads))
        self.window, self.causal, self.block_size = window, causal, block_size
        self.rotary = rotary
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, kv * self.head_dim, bias=bias)
        self.W_v = nn.Linear(num_hiddens, kv * self.head_dim, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        # `fuse_projections`' layers, None until made (so a float model's state_dict never holds them).
        self.W_qkv: nn.Module | None = None
        self.W_kv: nn.Module | None = None
        self.dropout = Dropout(dropout)

    def split_heads(self, x: Tensor, heads: int | None = None) -> Tensor:
        """(B, L, heads * Dh) -> (B, heads, L, Dh); heads: the query heads unless given (keys: num_kv_heads)."""
        B, L, _ = x.shape
        return x.view(B, L, heads or self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, Dh)

    @property
    def groups(self) -> int:
        """Query heads per key/value head (1 unless grouped-query attention)."""
        return self.num_heads // self.num_kv_heads if self.num_kv_heads else 1

    def _project_qkv(self, queries: Tensor, keys: Tensor, values: Tensor, cache: KVCache | None):
        """Q, K, V as (B, H, L, Dh); K, V come from (and go to) the cache when there is one."""
        if cache is not None and cache.static and cache.k is not None:
            return self.split_heads(self.W_q(queries)), cache.k, cache.v  # cross-attention: projected once
        if queries is keys and keys is values and all(is_float_linear(m) for m in (self.W_q, self.W_k, self.W_v)):
            # Self-attention: one (B*L, D) x (D, 3*H*Dh) matmul instead of three thinner ones (float
            # Linears only: a quantized or otherwise swapped projection runs as itself).
            q, k, v = linear(queries, *self._qkv_weight()).split(self.qkv_sizes(), dim=-1)
        elif queries is keys and keys is values and self.W_qkv is not None:
            q, k, v = self.W_qkv(queries).split(self.qkv_sizes(), dim=-1)  # `fuse_projections`
        elif keys is values and self.W_kv is not None:
            q = self.W_q(queries)
            k, v = self.W_kv(keys).split(self.qkv_sizes()[1:], dim=-1)  # cross-attention's fused keys, values
        else:
            q, k, v = self.W_q(queries), self.W_k(keys), self.W_v(values)
        q, k, v = self.split_heads(q), self.split_heads(k, self.num_kv_heads), self.split_heads(v, self.num_kv_heads)
        if self.rotary is not None and self.num_heads:
            q, k = self.rotary(q, k, offset=len(cache) if cache is not None else 0)
        if cache is not None:
            k, v = cache.update(k, v)
        return q, k, v

    def fuse_projections(self, convert: Callable[[nn.Linear], nn.Module], self_attention: bool = True) -> None:
        """Make this module's fused projection from its float W_q, W_k, W_v: `W_qkv` (self_attention: the
        three side by side, run when queries, keys and values are one tensor) or `W_kv` (cross-attention: W_k
        and W_v, run on the memory), an nn.Linear passed through `convert` (int8: `Int8Linear.from_float`,
        whose rows keep their own scales, so the outputs are the separate layers' exactly): one activation
        pass and one matmul per step instead of three. Float weights need none (`_qkv_weight`).

        Examples:
            >>> mha = MultiHeadAttention(8, 2).eval()
            >>> mha.fuse_projections(lambda linear: linear)
            >>> x = torch.randn(1, 3, 8)
            >>> torch.allclose(mha.W_qkv(x)[..., 8:16], mha.W_k(x))
            True
        """
        layers = [self.W_q, self.W_k, self.W_v] if self_attention else [self.W_k, self.W_v]
        if not all(is_float_linear(m) for m in layers):
            raise ValueError("fuse_projections needs float nn.Linear W_q, W_k, W_v: fuse before converting them")
        setattr(self, "W_qkv" if self_attention else "W_kv", convert(concatenated(layers)))

    def qkv_sizes(self) -> list[int]:
        """Widths of Q, K and V in the fused projection's output (K and V hold only the KV heads)."""
        kv = self.num_kv_heads * self.head_dim
        return [self.W_q.out_features, kv, kv]

    def _qkv_weight(self) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """W_q, W_k, W_v (and biases) concatenated, and that weight packed for oneDNN or None
        (`concatenated_weight`: kept across decoding steps until a weight changes)."""
        return concatenated_weight(self.__dict__, "_qkv_cached", [self.W_q, self.W_k, self.W_v])

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_qkv_cached", None)  # a cache (it may hold an opaque oneDNN weight): rebuilt on use
        return state

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens=None,
        mask=None,
        causal: bool | None = None,
        cache: KVCache | None = None,
        head_mask=None,
        beam: int = 1,
        position_bias: PositionBias | None = None,
    ) -> Tensor:
        """beam > 1 ("beamable" attention, as fairseq's BeamableMM): queries (B*beam, Lq, D) against keys
        and values (B, Lk, D); each group of `beam` consecutive query rows attends to one key row (the
        hypotheses of one sentence against its encoder memory, which is then never copied per
        hypothesis). The groups are folded into the query axis, (B, beam*Lq, D), which changes no
        output: only key masks that are the same for every query (valid_lens (B,)) are allowed (and no
        position bias)."""
        rows = queries.shape[0]
        causal = self.causal if causal is None else causal
        if beam > 1:
            if position_bias is not None:
                raise ValueError("beam > 1 folds beams into the query axis: it allows no position bias")
            queries = fold_beams(queries, keys, valid_lens, mask, causal, self.window, beam)
        check_qkv(queries, keys, values)
        for name, t in (("queries", queries), ("keys", keys), ("values", values)):
            if t.shape[-1] != self.num_hiddens:
                raise ValueError(f"{name} must have {self.num_hiddens} features, got shape {tuple(t.shape)}")
        gate = self._gate(head_mask)
        B, Lq, _ = queries.shape
        # Projected even with every head pruned (H = 0, empty tensors): the cache must still grow, since
        # decoding reads the number of steps done from it.
        q, k, v = self._project_qkv(queries, keys, values, cache)
        if self.num_heads == 0:  # only W_o's bias remains
            out = q
        elif (all_finite(q) and cache.finite) if cache is not None else all_finite(q, k, v):
            # With a cache only the new query is checked: the cache knows whether its keys/values are.
            out = self._attend(q, k, v, valid_lens, mask, causal, cache, beam, position_bias)
        else:
            out = self._attend_nonfinite(q, k, v, valid_lens, mask, causal, beam, position_bias)
        if gate is not None:
            out = out * gate.to(out.dtype)[None, :, None, None]  # (B, H, Lq, Dh) * (1, H, 1, 1)
        out = out.transpose(1, 2).reshape(B, Lq, self.num_heads * self.head_dim)  # (B, Lq, H*Dh)
        return self.W_o(out).view(rows, Lq // beam, self.num_hiddens)  # unfolds the beams (free: a view)

    def _gate(self, head_mask) -> Tensor | None:
        """The explicit head_mask times any mask `mask_heads` set for this module in this context."""
        ctx = active_head_mask(self)
        if head_mask is not None:
            head_mask = check_head_mask(head_mask, self.num_heads)
            return head_mask if ctx is None else head_mask * ctx
        return ctx

    def _attend(
        self, q, k, v, valid_lens, mask, causal, cache: KVCache | None = None, beam: int = 1, position_bias=None
    ) -> Tensor:
        """Pick the path: math (recording), blockwise local, or fused SDPA. Returns (B, H, Lq, Dh)."""
        Lq, Lk = q.shape[2], k.shape[2]
        if self.recording:
            out, weights = self._math(q, k, v, valid_lens, mask, causal, position_bias)
            self._record(unfold_beams(weights, beam))
            return out
        if self._use_blockwise(Lq, Lk, valid_lens, mask):
            return local_blockwise(self, q, k, v, valid_lens, causal, position_bias)
        if position_bias is not None:
            visible = build_mask(q.shape[0], Lq, Lk, valid_lens, mask, causal, self.window, q.device)
            bias = self._bias(position_bias, torch.arange(Lk - Lq, Lk), torch.arange(Lk), q.device)
            return self._sdpa_masked(q, k, v, visible, bias)
        return self._fused(q, k, v, valid_lens, mask, causal, cache)

    def _bias(self, position_bias: PositionBias, q_pos: Tensor, k_pos: Tensor, device) -> Tensor:
        """The float bias (1|B, H, Lq, Lk) of these query/key positions, for this module's heads."""
        bias = position_bias(q_pos.to(device), k_pos.to(device))
        if bias.shape[1] != self.num_heads:  # pruned heads: keep the rows of the heads left
            bias = bias[:, torch.tensor(self.kept_heads, dtype=torch.long, device=bias.device)]
        return bias

    def _sdpa(self, q, k, v, attn_mask=None, is_causal: bool = False) -> Tensor:
        """SDPA with this module's dropout, letting groups of query heads share KV heads (GQA)."""
        p = self.dropout.p if self.training else 0.0
        gqa = self.groups > 1
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=is_causal, enable_gqa=gqa
        )

    def _repeat_kv(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """K, V with each KV head repeated for the G query heads it serves (GQA; as is for G = 1)."""
        if self.groups > 1:
            k, v = k.repeat_interleave(self.groups, dim=1), v.repeat_interleave(self.groups, dim=1)
        return k, v

    def _native(self, q, k, v, lens: Tensor | None = None) -> Tensor | None:
        """A decoding step's fp32 or bf16 queries on attnlab's C kernel (faster than SDPA at a few queries over
        a few dozen keys, BENCHMARKS.md); None where it does not apply (`native_few_queries`)."""
        if self.training and self.dropout.p > 0:
            return None
        return native_few_queries(q, k, v, lens, self.groups)

    def _few_queries(self, q, k, v, visible: Tensor | None = None) -> Tensor:
        return few_queries_attention(q, *self._repeat_kv(k, v), visible)

    def _sdpa_masked(self, q, k, v, visible: Tensor | None, bias: Tensor | None) -> Tensor:
        """SDPA under a bool mask and/or a float bias; rows that see no key give zeros (not NaN)."""
        return sdpa_masked(q, k, v, visible, bias, self.dropout.p if self.training else 0.0)

    def _attend_nonfinite(self, q, k, v, valid_lens, mask, causal, beam: int = 1, position_bias=None) -> Tensor:
        """Attention when some query/key/value is NaN or inf, with the semantics of the class docstring.

        A 0 weight times a NaN value is NaN in a matmul, so hidden positions would leak; instead attend
        with non-finite entries zeroed, then set to NaN exactly the rows that see a non-finite input.
        """
        B, H, Lq, _ = q.shape
        Lk = k.shape[2]
        bad_q = ~torch.isfinite(q).all(dim=-1, keepdim=True)  # (B, H, Lq, 1)
        bad_kv = ~(torch.isfinite(k).all(dim=-1) & torch.isfinite(v).all(dim=-1))  # (B, Hkv, Lk)
        bad_kv = bad_kv.repeat_interleave(self.groups, dim=1)  # (B, H, Lk): what each query head sees
        visible = build_mask(B, Lq, Lk, valid_lens, mask, causal, self.window, q.device)
        seen = bad_kv[:, :, None, :] if visible is None else (visible & bad_kv[:, :, None, :])
        poisoned = bad_q | seen.any(dim=-1, keepdim=True)  # (B, H, Lq, 1)
        q, k, v = (torch.where(torch.isfinite(t), t, torch.zeros((), dtype=t.dtype)) for t in (q, k, v))
        if self.recording:
            out, weights = self._math(q, k, v, valid_lens, mask, causal, position_bias)
            self._record(unfold_beams(weights.masked_fill(poisoned, float("nan")), beam))
        else:
            out = self._attend(q, k, v, valid_lens, mask, causal, position_bias=position_bias)
        return out.masked_fill(poisoned, float("nan"))

    def prune_heads(self, heads) -> None:
        """Remove the given head indices for good: W_q/W_k/W_v lose their rows, W_o its columns.

        With grouped-query attention (groups of G = H / Hkv query heads sharing a KV head) only whole
        groups can go, taking their KV head with them: a group left smaller than the others has no
        equivalent grouped attention."""
        prune_projections(self, heads)

    # -- the three paths -------------------------------------------------------------------------
    def _math(self, q, k, v, valid_lens, mask, causal, position_bias=None) -> tuple[Tensor, Tensor]:
        """Explicit scores -> masked softmax -> pooling; returns the output and (B, H, Lq, Lk) weights."""
        B, _, Lq, Dh = q.shape
        Lk = k.shape[2]
        k, v = self._repeat_kv(k, v)  # each KV head serves G consecutive query heads
        visible = build_mask(B, Lq, Lk, valid_lens, mask, causal, self.window, q.device)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(Dh)
        if position_bias is not None:
            scores = scores + self._bias(position_bias, torch.arange(Lk - Lq, Lk), torch.arange(Lk), q.device)
        return attend(scores, v, visible, self.dropout)

    def _fused(self, q, k, v, valid_lens, mask, causal, cache: KVCache | None = None) -> Tensor:
        B, _, Lq, _ = q.shape
        Lk = k.shape[2]
        if causal and Lq == 1 and self.window is None and valid_lens is None and mask is None:
            # One query at the last position (a decoding step; causal masks align bottom-right) sees
            # every key: no mask to build.
            if (out := self._native(q, k, v)) is not None:
                return out
            return self._few_queries(q, k, v) if decoding_on_cpu(q) else self._sdpa(q, k, v)
        # Every query of row b sees keys [0, valid_lens[b]): the C kernel takes the lengths as they are.
        if (
            not causal
            and self.window is None
            and mask is None
            and (out := self._native(q, k, v, valid_lens)) is not None
        ):
            return out
        if (
            cache is not None
            and cache.static
            and not causal
            and self.window is None
            and mask is None
            and isinstance(valid_lens, Tensor)
            and valid_lens.dim() == 1
        ):
            # Cross-attention while decoding: the key mask is the same every step, built once per cache.
            visible, maybe_empty = cache.key_mask(valid_lens, Lq, q.device)
            if not maybe_empty:
                if decoding_on_cpu(q):
                    return self._few_queries(q, k, v, visible)
                return self._sdpa(q, k, v, attn_mask=visible)
        if (
            q.is_cuda
            and (causal or valid_lens is not None)
            and self.window is None
            and mask is None
            and (valid_lens is None or whole_lengths(valid_lens, B))
        ):
            # A padded batch or causal attention on a GPU: the kernel measured fastest there (`backends`).
            return masked_attention(q, k, v, valid_lens, causal, self.dropout.p if self.training else 0.0)
        if causal and self.window is None and valid_lens is None and mask is None and Lq == Lk:
            # SDPA's own causal flag aligns top-left, which equals ours only when Lq == Lk.
            return self._sdpa(q, k, v, is_causal=True)
        visible = build_mask(B, Lq, Lk, valid_lens, mask, causal, self.window, q.device)
        # Causal and window masks always let a query see itself, so only a zero length or a user mask can
        # empty a row; skipping the check otherwise keeps short sequences within a few % of raw SDPA.
        if visible is None or (
            mask is None and (valid_lens is None or not bool((torch.as_tensor(valid_lens) == 0).any()))
        ):
            return self._sdpa(q, k, v, attn_mask=visible)
        return self._sdpa_masked(q, k, v, visible, None)

    def _use_blockwise(self, Lq, Lk, valid_lens, mask) -> bool:
        # Only self-attention over a long sequence with (B,) lengths at most; anything fancier falls
        # back to the dense mask, which is exact too, just quadratic in memory.
        return (
            self.window is not None
            and mask is None
            and Lq == Lk
            and Lq > 2 * self.block_size
            and (valid_lens is None or torch.as_tensor(valid_lens).dim() == 1)
        )


__all__ = ["MultiHeadAttention", "KVCache", "window_mask"]
