"""FlashAttention in Triton: the chapter's online softmax (`attnlab.attention.online`), one tile of queries
against one tile of keys at a time, with the book's `valid_lens` and the causal mask inside the kernel.

Three passes, each a plain Python function that Triton compiles for a GPU (`triton.jit`) or runs on the CPU
under its interpreter (`attnlab.kernels.flash` builds both from these functions):

    forward     O = softmax(Q K^T * scale, masked) V, and the log-sum-exp of each row for the backward
    backward_kv dK, dV: one key tile against every query tile (and every query head sharing it) that sees it
    backward_q  dQ: one query tile against every key tile it sees

The math, for one query row with scores s_j = q . k_j * scale over its visible keys j (`online.py`):

    (1) m' = max(m, max_j s_j)                       running maximum
    (2) l' = exp(m - m') l + sum_j exp(s_j - m')     running sum
    (3) O' = exp(m - m') O + sum_j exp(s_j - m') v_j running output, rescaled
    (4) out = O / l,  lse = m + log l                (zeros and lse = +inf for a row that sees no key)
    (5) p_j = exp(s_j - lse)                         the softmax weights, recomputed in the backward
    (6) dv_j += p_j dout,  dp_j = dout . v_j,  ds_j = p_j (dp_j - dout . out)
    (7) dq += ds_j k_j * scale,  dk_j += ds_j q * scale

Key j is visible to query i (whose position is i + Lk - Lq: queries are the last Lq of the Lk positions, as
`attnlab.attention.masking.causal_mask` aligns them) when j < valid_lens[b] and, if causal, j <= i + Lk - Lq.
A tile that no query of the tile can see is never loaded: the loops stop at the last visible key.
Tensors are (B, H, L, D) with any strides but the last; K and V have Hkv = H / GROUPS heads (grouped-query).

(No `from __future__ import annotations` here: Triton reads the `tl.constexpr` annotations of a kernel.)
"""

import triton.language as tl

__all__ = ["backward_kv", "backward_q", "forward"]


def forward(
    Q, K, V, O, LSE, LENS, TRACE_M, TRACE_L, TRACE_O,  # noqa: E741 - pointers; LENS (B,) int32; TRACE_* if TRACE
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som,  # strides (batch, head, position)
    H, GROUPS, Lq, Lk, D, n_tiles, scale,
    HAS_LENS: tl.constexpr, CAUSAL: tl.constexpr, TRACE: tl.constexpr, DOT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program: BLOCK_M queries of head h of sentence b. Grid (cdiv(Lq, BLOCK_M), B * H)."""
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    b, h = bh // H, bh % H
    kv = h // GROUPS  # the key/value head this query head shares
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # query positions i
    dims = tl.arange(0, BLOCK_D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + dims[None, :],
                mask=(rows[:, None] < Lq) & (dims[None, :] < D), other=0.0)  # fmt: skip
    # keys [0, kv_len) exist for sentence b; the tile's last query sees keys up to its position: the loop ends there
    kv_len = tl.minimum(tl.load(LENS + b), Lk) if HAS_LENS else Lk
    end = tl.minimum(kv_len, (tile + 1) * BLOCK_M + Lk - Lq) if CAUSAL else kv_len
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running maximum
    l = tl.zeros([BLOCK_M], tl.float32)  # noqa: E741 - running sum
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # running output O, unnormalised
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)  # key positions j
        k = tl.load(K + b * skb + kv * skh + cols[:, None] * skn + dims[None, :],
                    mask=(cols[:, None] < kv_len) & (dims[None, :] < D), other=0.0)  # fmt: skip
        s = tl.dot(q, tl.trans(k), input_precision=DOT) * scale  # s_j = q . k_j * scale
        visible = cols[None, :] < kv_len  # rows past Lq compute what no one stores
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + Lk - Lq)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # (1)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no visible key yet: exp(-inf) = 0, not NaN
        p = tl.exp(s - shift[:, None])
        alpha = tl.exp(m - shift)  # exp(m - m'): what the earlier tiles are worth now
        l = alpha * l + tl.sum(p, axis=1)  # noqa: E741 - (2)
        v = tl.load(V + b * svb + kv * svh + cols[:, None] * svn + dims[None, :],
                    mask=(cols[:, None] < kv_len) & (dims[None, :] < D), other=0.0)  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT)  # (3)
        m = m_new
        if TRACE:  # the state after this key tile, for the chapter's figures; tiles never visited stay NaN
            at = bh * Lq * n_tiles + rows * n_tiles + start // BLOCK_N
            tl.store(TRACE_M + at, m, mask=rows < Lq)
            tl.store(TRACE_L + at, l, mask=rows < Lq)
            tl.store(TRACE_O + at[:, None] * D + dims[None, :], acc / tl.where(l > 0, l, 1.0)[:, None],
                     mask=(rows[:, None] < Lq) & (dims[None, :] < D))  # fmt: skip
    l_seen = tl.where(l > 0, l, 1.0)  # a row that saw no key keeps O = 0
    out = acc / l_seen[:, None]  # (4) out = O / l
    tl.store(O + b * sob + h * soh + rows[:, None] * som + dims[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < Lq) & (dims[None, :] < D))  # fmt: skip
    lse = tl.where(l > 0, m + tl.log(l_seen), float("inf"))  # (4): +inf makes every weight of an empty row 0 in (5)
    tl.store(LSE + bh * Lq + rows, lse, mask=rows < Lq)


def backward_kv(
    Q, K, V, DO, LSE, DELTA, DK, DV, LENS,  # DO, DK, DV laid out as Q, K, V; LSE, DELTA (B, H, Lq) contiguous
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn,
    Hkv, GROUPS, Lq, Lk, D, scale,
    HAS_LENS: tl.constexpr, CAUSAL: tl.constexpr, DOT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program: BLOCK_N keys of KV head kv of sentence b. Grid (cdiv(Lk, BLOCK_N), B * Hkv)."""
    tile, bkv = tl.program_id(0), tl.program_id(1).to(tl.int64)
    b, kv = bkv // Hkv, bkv % Hkv
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)  # key positions j
    dims = tl.arange(0, BLOCK_D)
    kv_len = tl.minimum(tl.load(LENS + b), Lk) if HAS_LENS else Lk
    at_k = b * skb + kv * skh + cols[:, None] * skn + dims[None, :]
    at_v = b * svb + kv * svh + cols[:, None] * svn + dims[None, :]
    inside = (cols[:, None] < Lk) & (dims[None, :] < D)
    k = tl.load(K + at_k, mask=inside, other=0.0)
    v = tl.load(V + at_v, mask=inside, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    # the first query tile that can see this key tile (causal: query i sees key j from i = j - (Lk - Lq) on);
    # a key tile past the sentence's length is seen by none: the loop is empty and dK, dV stay 0
    first = tl.maximum(tile * BLOCK_N - (Lk - Lq), 0) // BLOCK_M * BLOCK_M if CAUSAL else 0
    last = tl.where(tile * BLOCK_N < kv_len, Lq, first)
    for g in range(GROUPS):  # every query head that shares this key/value head
        h = kv * GROUPS + g
        bh = b * (Hkv * GROUPS) + h
        for start in range(first, last, BLOCK_M):
            rows = start + tl.arange(0, BLOCK_M)  # query positions i
            at_q = b * sqb + h * sqh + rows[:, None] * sqm + dims[None, :]
            row_in = (rows[:, None] < Lq) & (dims[None, :] < D)
            q = tl.load(Q + at_q, mask=row_in, other=0.0)
            do = tl.load(DO + at_q, mask=row_in, other=0.0)
            lse = tl.load(LSE + bh * Lq + rows, mask=rows < Lq, other=float("inf"))
            delta = tl.load(DELTA + bh * Lq + rows, mask=rows < Lq, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=DOT) * scale  # (BLOCK_M, BLOCK_N)
            visible = cols[None, :] < kv_len  # rows past Lq read lse = +inf: weight 0
            if CAUSAL:
                visible = visible & (cols[None, :] <= rows[:, None] + Lk - Lq)
            p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)  # (5)
            dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=DOT)  # (6) dv_j += p_j dout
            dp = tl.dot(do, tl.trans(v), input_precision=DOT)  # (6) dp_j = dout . v_j
            ds = p * (dp - delta[:, None])  # (6) ds_j = p_j (dp_j - dout . out)
            dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=DOT)  # (7) dk_j += ds_j q
    tl.store(DK + at_k, (dk * scale).to(DK.dtype.element_ty), mask=inside)  # (7) ... * scale
    tl.store(DV + at_v, dv.to(DV.dtype.element_ty), mask=inside)


def backward_q(
    Q, K, V, DO, LSE, DELTA, DQ, LENS,
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn,
    H, GROUPS, Lq, Lk, D, scale,
    HAS_LENS: tl.constexpr, CAUSAL: tl.constexpr, DOT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program: BLOCK_M queries of head h of sentence b. Grid (cdiv(Lq, BLOCK_M), B * H)."""
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    b, h = bh // H, bh % H
    kv = h // GROUPS
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    at_q = b * sqb + h * sqh + rows[:, None] * sqm + dims[None, :]
    row_in = (rows[:, None] < Lq) & (dims[None, :] < D)
    q = tl.load(Q + at_q, mask=row_in, other=0.0)
    do = tl.load(DO + at_q, mask=row_in, other=0.0)
    lse = tl.load(LSE + bh * Lq + rows, mask=rows < Lq, other=float("inf"))
    delta = tl.load(DELTA + bh * Lq + rows, mask=rows < Lq, other=0.0)
    kv_len = tl.minimum(tl.load(LENS + b), Lk) if HAS_LENS else Lk
    end = tl.minimum(kv_len, (tile + 1) * BLOCK_M + Lk - Lq) if CAUSAL else kv_len  # the forward's loop bound
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_in = (cols[:, None] < kv_len) & (dims[None, :] < D)
        k = tl.load(K + b * skb + kv * skh + cols[:, None] * skn + dims[None, :], mask=col_in, other=0.0)
        v = tl.load(V + b * svb + kv * svh + cols[:, None] * svn + dims[None, :], mask=col_in, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT) * scale
        visible = cols[None, :] < kv_len  # rows past Lq read lse = +inf: weight 0
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + Lk - Lq)
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)  # (5)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT)  # (6)
        ds = p * (dp - delta[:, None])  # (6)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=DOT)  # (7) dq += ds_j k_j
    tl.store(DQ + at_q, (dq * scale).to(DQ.dtype.element_ty), mask=row_in)  # (7) ... * scale
