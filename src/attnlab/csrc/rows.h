/* Row passes shared by attnlab's int8 kernels (int8_rows.c, int8_step.c) and the residual LayerNorm
   (layer_norm.c), so a fused decoding step computes every row exactly as the separate passes do:

     quantize_row:  x (K,) fp32 -> q (K,) int8 = round(x / s), returns s = max(|x|) / 127
     dequant_row:   acc (N,) int32 -> y (N,) fp32 = acc * row_scale * col_scale (+ bias), max(y, 0) with relu
     add_ln_row:    out (D,) = LayerNorm(x + y) * weight + bias (weight and bias may be NULL) */

#ifndef ATTNLAB_ROWS_H
#define ATTNLAB_ROWS_H

#include "vec.h"

typedef int8_t vb __attribute__((vector_size(16)));

static inline vf vabs(vf v) { return (vf)((vi)v & 0x7fffffff); }

/* max(a, b) lane by lane for non-NaN lanes (NaN rows are caught apart). */
static inline vf vmaxf(vf a, vf b) { return select(a > b, a, b); }

/* round-half-to-even of |v| < 2^22 by the FPU's own rounding (adding 1.5 * 2^23 leaves no fraction bits);
   NaN stays NaN. Without -ffast-math the compiler keeps (v + c) - c as written. */
static inline vf round_even(vf v) { return (v + 12582912.0f) - 12582912.0f; }

static inline int8_t quantize_one(float x, float s) {
    const float r = nearbyintf(x / s);
    return (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r == r ? r : 0.0f); /* defined cast */
}

/* round() is round-half-to-even, as torch.round. A NaN makes the row's scale NaN, so its outputs are NaN,
   as on PyTorch's path; an inf gives an inf scale (zeros times inf: NaN) likewise. */
static inline float quantize_row(const float *row, int64_t K, int8_t *out) {
    const int64_t K16 = K - K % W;
    /* Four running maxima: one would make each step wait for the last compare (rows are short). */
    vf m0 = splat(0.0f), m1 = m0, m2 = m0, m3 = m0;
    vi vnan = (vi){0};
    int64_t k = 0;
    for (; k + 4 * W <= K16; k += 4 * W) {
        const vf v0 = load(row + k), v1 = load(row + k + W), v2 = load(row + k + 2 * W), v3 = load(row + k + 3 * W);
        m0 = vmaxf(m0, vabs(v0));
        m1 = vmaxf(m1, vabs(v1));
        m2 = vmaxf(m2, vabs(v2));
        m3 = vmaxf(m3, vabs(v3));
        vnan |= (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3);
    }
    for (; k < K16; k += W) {
        const vf v = load(row + k);
        m0 = vmaxf(m0, vabs(v));
        vnan |= v != v;
    }
    float amax = hmax(vmaxf(vmaxf(m0, m1), vmaxf(m2, m3)));
    int nan = 0;
    for (int i = 0; i < W; i++) nan |= vnan[i] != 0;
    for (k = K16; k < K; k++) {
        const float a = fabsf(row[k]);
        amax = a > amax ? a : amax;
        nan |= row[k] != row[k];
    }
    const float s = nan ? NAN : (amax > 1e-12f ? amax : 1e-12f) / 127.0f;
    const vf vs = splat(s);
    for (k = 0; k < K16; k += W) {
        vf r = round_even(load(row + k) / vs); /* |x / s| <= 127 unless s is NaN or inf */
        r = select(r > 127.0f, splat(127.0f), r);
        r = select(r < -127.0f, splat(-127.0f), r);
        r = select(r == r, r, splat(0.0f));
        const vb b = __builtin_convertvector(__builtin_convertvector(r, vi), vb);
        memcpy(out + k, &b, sizeof b);
    }
    for (k = K16; k < K; k++) out[k] = quantize_one(row[k], s);
    return s;
}

static inline void dequant_row(const int32_t *a, int64_t N, float rs, const float *col_scale, const float *bias,
                               int relu, float *out) {
    if (bias) {
#pragma omp simd
        for (int64_t n = 0; n < N; n++) out[n] = bias[n] + ((float)a[n] * rs) * col_scale[n];
    } else {
#pragma omp simd
        for (int64_t n = 0; n < N; n++) out[n] = ((float)a[n] * rs) * col_scale[n];
    }
    if (relu) {
#pragma omp simd
        for (int64_t n = 0; n < N; n++) out[n] = out[n] < 0.0f ? 0.0f : out[n]; /* NaN stays, as torch.relu */
    }
}

/* mean and the biased variance in fp32 over the row of s = x + y, in two passes, as torch.layer_norm. */
static inline void add_ln_row(const float *a, const float *b, int64_t D, const float *weight, const float *bias,
                              float eps, float *o) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < D; d++) {
        o[d] = a[d] + b[d];
        sum += o[d];
    }
    const float mean = sum / (float)D;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t d = 0; d < D; d++) sq += (o[d] - mean) * (o[d] - mean);
    const float rstd = 1.0f / sqrtf(sq / (float)D + eps);
    if (weight && bias) {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) o[d] = (o[d] - mean) * rstd * weight[d] + bias[d];
    } else {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) o[d] = (o[d] - mean) * rstd;
    }
}

#endif
