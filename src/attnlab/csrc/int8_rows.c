/* The two element-wise passes around an int8 matmul with per-row activation scales (CTranslate2's recipe),
   one pass each instead of PyTorch's five to six operators:

     attnlab_quantize_rows_f32:  x (M, K) fp32 -> q (M, K) int8 = round(x / s), s (M,) = max(|x row|) / 127
     attnlab_dequantize_f32:     acc (M, N) int32 -> y (M, N) fp32 = acc * row_scale * col_scale (+ bias)

   round() is round-half-to-even, as torch.round; y may alias acc (the int32 sums are converted in place). */

#include <math.h>
#include <stdint.h>

void attnlab_quantize_rows_f32(const float *x, int64_t ldx, int64_t M, int64_t K, int8_t *q, float *scale) {
    for (int64_t m = 0; m < M; m++) {
        const float *row = x + m * ldx;
        float amax = 0.0f;
        int nan = 0;
#pragma omp simd reduction(max : amax) reduction(| : nan)
        for (int64_t k = 0; k < K; k++) {
            const float a = fabsf(row[k]);
            amax = a > amax ? a : amax;
            nan |= row[k] != row[k];
        }
        /* A NaN makes the row's scale NaN, so its outputs are NaN, as on PyTorch's path; an inf gives an
           inf scale (zeros times inf: NaN) likewise. */
        const float s = nan ? NAN : (amax > 1e-12f ? amax : 1e-12f) / 127.0f;
        scale[m] = s;
        int8_t *out = q + m * K;
#pragma omp simd
        for (int64_t k = 0; k < K; k++) {
            const float r = nearbyintf(row[k] / s);
            out[k] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r == r ? r : 0.0f); /* defined cast */
        }
    }
}

void attnlab_dequantize_f32(const int32_t *acc, int64_t M, int64_t N, const float *row_scale, const float *col_scale,
                            const float *bias, float *y) {
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
    }
}
