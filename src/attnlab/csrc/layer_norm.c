/* The post-norm residual of a decoding step, LayerNorm(x + y), in one pass over each row instead of
   PyTorch's two operators (an add, then layer_norm, each a dispatch and a new tensor):

     attnlab_add_layer_norm_f32:  out (M, D) = (s - mean(s)) / sqrt(var(s) + eps) * weight + bias, s = x + y

   mean and the biased variance in fp32 over each row of s, in two passes, as torch.layer_norm computes
   them; weight and bias may be NULL (no affine). */

#include <math.h>
#include <stdint.h>

void attnlab_add_layer_norm_f32(const float *x, const float *y, int64_t M, int64_t D, const float *weight,
                                const float *bias, float eps, float *out) {
    for (int64_t m = 0; m < M; m++) {
        const float *a = x + m * D, *b = y + m * D;
        float *o = out + m * D;
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
}
