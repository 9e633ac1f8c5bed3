/* A decoding step of an int8 post-norm Transformer decoder (greedy, or every hypothesis of a beam) with one C pass between each two int8
   matmuls (`torch._int_mm`), instead of the three to eight PyTorch and C calls of the modules' path. Each
   pass ends by quantizing its output rows for the next matmul (per-row scales, rows.h), so the fp32
   activations between layers are written once, where a residual needs them:

     attnlab_step_embed:      x = embedding[token] * scale + position            -> x, (q, s)
     attnlab_step_attention:  dequantized projections -> attention of one query per row and head, its own
                              new key/value first written to the cache (self-attention), or over the first
                              lens[m / fold] keys of source m / fold (cross-attention: the `fold`
                              hypotheses of a sentence read its keys where they lie) -> (q, s)
     attnlab_step_add_ln:     LayerNorm(x + dequantized sums)                    -> x', (q, s)
     attnlab_step_relu:       max(dequantized sums, 0) (the FFN's hidden layer)  -> (q, s)

   Every row is computed by the same functions as the separate passes (rows.h, attend.h), in the same
   order, so the step's outputs are theirs bit for bit. Rows are independent: a NaN or inf in one row's
   input makes that row's scale NaN or inf, its outputs NaN, and leaves the others exact. Attention's output
   row is NaN where its query or its new key or value is not finite (`MultiHeadAttention` makes NaN the heads
   that see it; the quantization for W_o then makes the whole row NaN on both paths). The caller sends a
   step whose caches already hold a non-finite key or value to the modules. */

#include <stdlib.h>

#include "attend.h"
#include "rows.h"

DEFINE_HEADS(f32, float)

/* Whether x[0, n) holds no NaN or inf (x - x is NaN for both). */
static int all_finite(const float *x, int64_t n) {
    vi bad = {0};
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        const vf v = load(x + i);
        bad |= (v - v) != 0.0f;
    }
    int ok = 1;
    for (int j = 0; j < W; j++) ok &= bad[j] == 0;
    for (; i < n; i++) ok &= (x[i] - x[i]) == 0.0f;
    return ok;
}

/* e * scale + p with two roundings, as PyTorch's multiply then add (no fused multiply-add: GCC by the
   attribute, Clang by the pragma; the build's -ffp-contract=fast would fuse them). */
#ifdef __clang__
static void embed_row(const float *e, float scale, const float *p, int64_t D, float *o) {
#pragma clang fp contract(off)
    for (int64_t d = 0; d < D; d++) o[d] = e[d] * scale + p[d];
}
#else
__attribute__((optimize("fp-contract=off"))) static void embed_row(const float *e, float scale, const float *p,
                                                                   int64_t D, float *o) {
    for (int64_t d = 0; d < D; d++) o[d] = e[d] * scale + p[d];
}
#endif

/* Every row adds the step's position. Returns 0, or 2 when a token lies outside [0, V) (nothing computed: the
   modules' path says so). */
int attnlab_step_embed(const float *table, int64_t ld, int64_t V, const int64_t *tokens, int64_t M, int64_t D,
                       float scale, const float *position, float *x, int8_t *q, float *s) {
    for (int64_t m = 0; m < M; m++)
        if (tokens[m] < 0 || tokens[m] >= V) return 2;
    for (int64_t m = 0; m < M; m++) {
        embed_row(table + tokens[m] * ld, scale, position, D, x + m * D);
        s[m] = quantize_row(x + m * D, D, q + m * D);
    }
    return 0;
}

/* Row m's keys and values for steps [0, keys): step t < cols from cache row anc[t], later ones from row m, into
   gk, gv (H / G, keys, Dh). Returns 0 without copying when every step already lies in row m. */
static int gather_steps(const int64_t *anc, int64_t cols, int64_t m, const float *k, int64_t ksb, int64_t ksh,
                        int64_t kst, const float *v, int64_t vsb, int64_t vsh, int64_t vst, int64_t Hkv, int64_t Dh,
                        int64_t keys, float *gk, float *gv) {
    int own = 1;
    for (int64_t t = 0; t < cols; t++) own &= anc[t] == m;
    if (own) return 0;
    const size_t bytes = sizeof(float) * (size_t)Dh;
    for (int64_t hk = 0; hk < Hkv; hk++)
        for (int64_t t = 0; t < keys; t++) {
            const int64_t r = t < cols ? anc[t] : m;
            memcpy(gk + (hk * keys + t) * Dh, k + r * ksb + hk * ksh + t * kst, bytes);
            memcpy(gv + (hk * keys + t) * Dh, v + r * vsb + hk * vsh + t * vst, bytes);
        }
    return 1;
}

/* acc (M, Nq [+ 2 Nkv]) int32 sums of the query [key, value] projections, row scales rs, column scales cs
   and bias of the fused projection. kv_write: self-attention, whose key/value of row m go to slot L of the
   caches (k[m, h, L, :]) before its query attends over L + 1 keys; otherwise cross-attention of row m over
   the first lens[m / fold] of Lk keys of key row m / fold (all of them where lens is NULL): `fold` consecutive
   rows (a sentence's beam hypotheses) share one source's keys, never copied per row. Strides in elements;
   keys (M / fold, H / G, *, Dh).
   anc (self-attention, may be NULL): the steps t < anc_cols of row m lie in cache row anc[m * anc_cols + t]
   (beam search's reorders kept as an index, `TransformerState.ancestry`), the later ones in row m; a row
   whose steps lie elsewhere is gathered into a scratch buffer first, so attention reads the same keys in the
   same order as over a reordered cache.
   Returns 0, 1 when memory ran out, 2 when a length lies outside [0, Lk], or 4 | 0 when a written key or
   value was not finite (the cache's `finite` flag). */
int attnlab_step_attention(const int32_t *acc, int64_t M, const float *rs, const float *cs, const float *bias,
                           int64_t H, int64_t G, int64_t Dh, float *k, int64_t ksb, int64_t ksh, int64_t kst, float *v,
                           int64_t vsb, int64_t vsh, int64_t vst, int kv_write, int64_t L, const int64_t *lens,
                           int64_t Lk, int64_t fold, const int64_t *anc, int64_t anc_cols, float scale, int8_t *q,
                           float *s) {
    const int64_t Nq = H * Dh, Nkv = H / G * Dh, N = kv_write ? Nq + 2 * Nkv : Nq;
    const int64_t keys = kv_write ? L + 1 : Lk, padded = (keys + W - 1) / W * W;
    if (kv_write || fold < 1) fold = 1;
    if (lens && !kv_write)
        for (int64_t m = 0; m < M / fold; m++)
            if (lens[m] < 0 || lens[m] > Lk) return 2;
    if (!kv_write || anc_cols <= 0) anc = NULL;
    /* One buffer: the dequantized row (N), the attention output (Nq), the scores (H * (padded + 1)), and with
       anc a row's gathered keys and values (2 * H / G * keys * Dh). */
    const int64_t gathered = anc ? 2 * Nkv * keys : 0;
    float *row = malloc(sizeof(float) * (size_t)(N + Nq + H * (padded + 1) + gathered));
    if (!row) return 1;
    float *out = row + N, *scores = out + Nq, *gk = scores + H * (padded + 1), *gv = gk + Nkv * keys;
    int finite = 1;
    for (int64_t m = 0; m < M; m++) {
        dequant_row(acc + m * N, N, rs[m], cs, bias, 0, row);
        const int64_t src = m / fold;
        float *km = k + src * ksb, *vm = v + src * vsb;
        if (kv_write) {
            for (int64_t hk = 0; hk < H / G; hk++) {
                memcpy(km + hk * ksh + L * kst, row + Nq + hk * Dh, sizeof(float) * (size_t)Dh);
                memcpy(vm + hk * vsh + L * vst, row + Nq + Nkv + hk * Dh, sizeof(float) * (size_t)Dh);
            }
        }
        const int kv_finite = !kv_write || all_finite(row + Nq, 2 * Nkv);
        finite &= kv_finite;
        if (!kv_finite || !all_finite(row, Nq)) {
            for (int64_t i = 0; i < Nq; i++) out[i] = NAN;
            s[m] = quantize_row(out, Nq, q + m * Nq);
            continue;
        }
        const int64_t n = kv_write ? keys : lens ? lens[src] : Lk;
        if (anc && gather_steps(anc + m * anc_cols, anc_cols, m, k, ksb, ksh, kst, v, vsb, vsh, vst, H / G, Dh, keys,
                                gk, gv))
            query_f32(row, Dh, gk, keys * Dh, Dh, gv, keys * Dh, Dh, H, G, Dh, n, scale, scores, padded, out);
        else
            query_f32(row, Dh, km, ksh, kst, vm, vsh, vst, H, G, Dh, n, scale, scores, padded, out);
        s[m] = quantize_row(out, Nq, q + m * Nq);
    }
    free(row);
    return finite ? 0 : 4;
}

/* x' (M, D) = LayerNorm(x + dequantized acc), written to xo (may not alias x) and quantized to (q, s). */
int attnlab_step_add_ln(const int32_t *acc, int64_t M, int64_t D, const float *rs, const float *cs, const float *bias,
                        const float *x, const float *weight, const float *ln_bias, float eps, float *xo, int8_t *q,
                        float *s) {
    float *y = malloc(sizeof(float) * (size_t)D);
    if (!y) return 1;
    for (int64_t m = 0; m < M; m++) {
        dequant_row(acc + m * D, D, rs[m], cs, bias, 0, y);
        add_ln_row(x + m * D, y, D, weight, ln_bias, eps, xo + m * D);
        s[m] = quantize_row(xo + m * D, D, q + m * D);
    }
    free(y);
    return 0;
}

/* max(dequantized acc (M, N), 0) quantized to (q, s): the FFN's hidden rows, never kept in fp32. */
int attnlab_step_relu(const int32_t *acc, int64_t M, int64_t N, const float *rs, const float *cs, const float *bias,
                      int8_t *q, float *s) {
    float *y = malloc(sizeof(float) * (size_t)N);
    if (!y) return 1;
    for (int64_t m = 0; m < M; m++) {
        dequant_row(acc + m * N, N, rs[m], cs, bias, 1, y);
        s[m] = quantize_row(y, N, q + m * N);
    }
    free(y);
    return 0;
}
