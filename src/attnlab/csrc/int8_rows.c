/* The two element-wise passes around an int8 matmul with per-row activation scales (CTranslate2's recipe),
   one pass each instead of PyTorch's five to six operators:

     attnlab_quantize_rows_f32:  x (M, K) fp32 -> q (M, K) int8 = round(x / s), s (M,) = max(|x row|) / 127
     attnlab_dequantize_f32:     acc (M, N) int32 -> y (M, N) fp32 = acc * row_scale * col_scale (+ bias),
                                 then max(y, 0) with `relu` (an FFN's first layer: one pass, not two)

   round() is round-half-to-even, as torch.round; y may alias acc (the int32 sums are converted in place). */

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

void attnlab_quantize_rows_f32(const float *x, int64_t ldx, int64_t M, int64_t K, int8_t *q, float *scale) {
    const int64_t K16 = K - K % W;
    for (int64_t m = 0; m < M; m++) {
        const float *row = x + m * ldx;
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
        for (int64_t k = K16; k < K; k++) {
            const float a = fabsf(row[k]);
            amax = a > amax ? a : amax;
            nan |= row[k] != row[k];
        }
        /* A NaN makes the row's scale NaN, so its outputs are NaN, as on PyTorch's path; an inf gives an
           inf scale (zeros times inf: NaN) likewise. */
        const float s = nan ? NAN : (amax > 1e-12f ? amax : 1e-12f) / 127.0f;
        scale[m] = s;
        int8_t *out = q + m * K;
        const vf vs = splat(s);
        for (int64_t k = 0; k < K16; k += W) {
            vf r = round_even(load(row + k) / vs); /* |x / s| <= 127 unless s is NaN or inf */
            r = select(r > 127.0f, splat(127.0f), r);
            r = select(r < -127.0f, splat(-127.0f), r);
            r = select(r == r, r, splat(0.0f));
            const vb b = __builtin_convertvector(__builtin_convertvector(r, vi), vb);
            memcpy(out + k, &b, sizeof b);
        }
        for (int64_t k = K16; k < K; k++) out[k] = quantize_one(row[k], s);
    }
}

void attnlab_dequantize_f32(const int32_t *acc, int64_t M, int64_t N, const float *row_scale, const float *col_scale,
                            const float *bias, int relu, float *y) {
    for (int64_t m = 0; m < M; m++) {
        const int32_t *a = acc + m * N;
        float *out = y + m * N;
        const float rs = row_scale[m];
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
}
