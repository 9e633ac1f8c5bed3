/* dst[a, b, c, :] = src[a, b, c, :] for two (n0, n1, n2, row) tensors of any strides but a contiguous last
   dimension (strides and the row in bytes): a decoding step's new keys/values written into the cache, a
   view of the fused Q/K/V projection into a view of the cache's buffer, whose strides defeat PyTorch's
   copy (its per-row overhead costs many times what moving the bytes does). */

#include <stdint.h>
#include <string.h>

void attnlab_copy_rows(const char *src, int64_t s0, int64_t s1, int64_t s2, char *dst, int64_t d0, int64_t d1,
                       int64_t d2, int64_t n0, int64_t n1, int64_t n2, int64_t row) {
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            for (int64_t c = 0; c < n2; c++) memcpy(dst + a * d0 + b * d1 + c * d2, src + a * s0 + b * s1 + c * s2, row);
}
