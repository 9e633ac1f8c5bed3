/* Attention of a decoding step's few queries over cached keys and values, fp32, on the CPU.

   softmax(q k^T * scale) v for every (batch row, query head, query), reading the keys/values where
   they lie (strided views of the KV cache) and writing (B, Lq, H, Dh), the layout the output
   projection reads. One call covers the whole batch: PyTorch's SDPA runs a small GEMM per
   (row, head), which at one query over 5-30 keys costs several times the arithmetic.

   Built at first use by attnlab.kernels.loader with the machine's C compiler (-march=native). Head sizes
   that are a multiple of 16 up to 128 run on 16-float vectors (vec.h) with the query and the output
   held in registers; other sizes take a plain loop. Keys and values are fp32, or bf16 (bf16 decoding's
   cache, widened to fp32 as they are read); queries, sums and outputs are fp32. The softmax subtracts the row maximum, exponentiates (Cephes' expf polynomial,
   ~1 ulp) and divides once at the end, as SDPA's flash kernel does. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attend.h"

/* The exported kernel NAME for keys/values of type KT. q fp32 (B, H, Lq, Dh) and k, v (B, H / G, Lk, Dh) by
   their strides in elements; out (B, Lq, H, Dh). Returns 0; 1 when memory ran out; 2 when a length lies
   outside [0, Lk] (nothing computed). One thread: decoding's batch workers each call it on their own batch
   (splitting a call across threads measured no faster at B 64-256). */
#define DEFINE_KERNEL(NAME, SUF, KT)                                                                     \
    DEFINE_HEADS(SUF, KT)                                                                                \
    int NAME(const float *q_, int64_t qsb, int64_t qsh, int64_t qsi, const KT *k_, int64_t ksb, int64_t ksh,  \
             int64_t kst, const KT *v_, int64_t vsb, int64_t vsh, int64_t vst, const int64_t *lens,          \
             float *out, int64_t B, int64_t H, int64_t G, int64_t Lq, int64_t Lk, int64_t Dh, float scale) {  \
        const int64_t padded = (Lk + W - 1) / W * W, need = H * (padded + 1);                           \
        float stack_scores[2048];                                                                        \
        if (lens)                                                                                        \
            for (int64_t b = 0; b < B; b++)                                                              \
                if (lens[b] < 0 || lens[b] > Lk) return 2; /* PyTorch's path names the error */          \
        float *s = need <= 2048 ? stack_scores : malloc(sizeof(float) * (size_t)need);                   \
        if (!s) return 1;                                                                                \
        for (int64_t b = 0; b < B; b++)                                                                  \
            for (int64_t i = 0; i < Lq; i++)                                                             \
                query_##SUF(q_ + b * qsb + i * qsi, qsh, k_ + b * ksb, ksh, kst, v_ + b * vsb, vsh, vst, H, G, \
                            Dh, lens ? lens[b] : Lk, scale, s, padded, out + (b * Lq + i) * H * Dh);     \
        if (s != stack_scores) free(s);                                                                  \
        return 0;                                                                                        \
    }

DEFINE_KERNEL(attnlab_few_queries_f32, f32, float)
DEFINE_KERNEL(attnlab_few_queries_bf16kv, bf16, uint16_t) /* bf16 decoding's cache, computed in fp32 */
