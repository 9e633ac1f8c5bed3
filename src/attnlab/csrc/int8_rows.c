/* The two element-wise passes around an int8 matmul with per-row activation scales (CTranslate2's recipe),
   one pass each instead of PyTorch's five to six operators (the rows themselves: rows.h):

     attnlab_quantize_rows_f32:  x (M, K) fp32 -> q (M, K) int8 = round(x / s), s (M,) = max(|x row|) / 127
     attnlab_dequantize_f32:     acc (M, N) int32 -> y (M, N) fp32 = acc * row_scale * col_scale (+ bias),
                                 then max(y, 0) with `relu` (an FFN's first layer: one pass, not two)

   y may alias acc (the int32 sums are converted in place). */

#include "rows.h"

void attnlab_quantize_rows_f32(const float *x, int64_t ldx, int64_t M, int64_t K, int8_t *q, float *scale) {
    for (int64_t m = 0; m < M; m++) scale[m] = quantize_row(x + m * ldx, K, q + m * K);
}

void attnlab_dequantize_f32(const int32_t *acc, int64_t M, int64_t N, const float *row_scale, const float *col_scale,
                            const float *bias, int relu, float *y) {
    for (int64_t m = 0; m < M; m++) dequant_row(acc + m * N, N, row_scale[m], col_scale, bias, relu, y + m * N);
}
