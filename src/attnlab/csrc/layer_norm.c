/* The post-norm residual of a decoding step, LayerNorm(x + y), in one pass over each row instead of
   PyTorch's two operators (an add, then layer_norm, each a dispatch and a new tensor):

     attnlab_add_layer_norm_f32:  out (M, D) = (s - mean(s)) / sqrt(var(s) + eps) * weight + bias, s = x + y

   mean and the biased variance in fp32 over each row of s, in two passes, as torch.layer_norm computes
   them (rows.h); weight and bias may be NULL (no affine). */

#include "rows.h"

void attnlab_add_layer_norm_f32(const float *x, const float *y, int64_t M, int64_t D, const float *weight,
                                const float *bias, float eps, float *out) {
    for (int64_t m = 0; m < M; m++) add_ln_row(x + m * D, y + m * D, D, weight, bias, eps, out + m * D);
}
