/* Whether every element of a (d0, d1, d2, n) tensor is finite (no NaN, no inf), read through its strides
   (in elements; the last dimension contiguous): attention's guard before its fast path, one pass over the
   new keys/values or queries instead of a sum and a read of it back to Python.

     attnlab_all_finite_f32:  fp32; x - x is 0 for a finite x, NaN for NaN or inf
     attnlab_all_finite_bf16: bf16 as its bits; an all-ones exponent is NaN or inf */

#include <stdint.h>

#define DEFINE_ALL_FINITE(NAME, T, BAD)                                                                   \
    int NAME(const T *x, int64_t d0, int64_t d1, int64_t d2, int64_t n, int64_t s0, int64_t s1, int64_t s2) { \
        for (int64_t a = 0; a < d0; a++)                                                                   \
            for (int64_t b = 0; b < d1; b++)                                                               \
                for (int64_t c = 0; c < d2; c++) {                                                         \
                    const T *row = x + a * s0 + b * s1 + c * s2;                                           \
                    int bad = 0;                                                                           \
                    _Pragma("omp simd reduction(| : bad)") for (int64_t i = 0; i < n; i++) bad |= BAD(row[i]); \
                    if (bad) return 0;                                                                     \
                }                                                                                          \
        return 1;                                                                                          \
    }

#define F32_BAD(v) ((v) - (v) != 0.0f)
#define BF16_BAD(v) (((v) & 0x7f80) == 0x7f80)

DEFINE_ALL_FINITE(attnlab_all_finite_f32, float, F32_BAD)
DEFINE_ALL_FINITE(attnlab_all_finite_bf16, uint16_t, BF16_BAD)
