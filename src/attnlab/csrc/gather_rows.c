/* dst[i, b, c, :] = src[index[i], b, c, :] for (n, n1, n2, row) views of any strides but a contiguous last
   dimension (strides and the row in bytes): a decoding cache keeping the rows of the hypotheses that go on
   (beam search's parents, sentences leaving the batch), its L filled steps of each head copied straight into
   the other buffer. Where a head's steps lie back to back in both (s2 == d2 == row), each is one memcpy. */

#include <stdint.h>
#include <string.h>

/* Returns 0, or 2 when an index lies outside [0, rows) (nothing copied: PyTorch's path names the error). */
int attnlab_gather_rows(const char *src, int64_t rows, int64_t s0, int64_t s1, int64_t s2, char *dst, int64_t d0,
                        int64_t d1, int64_t d2, const int64_t *index, int64_t n, int64_t n1, int64_t n2, int64_t row) {
    for (int64_t i = 0; i < n; i++)
        if (index[i] < 0 || index[i] >= rows) return 2;
    const int whole = s2 == row && d2 == row;
    for (int64_t i = 0; i < n; i++) {
        const char *from = src + index[i] * s0;
        char *to = dst + i * d0;
        for (int64_t b = 0; b < n1; b++) {
            if (whole) {
                memcpy(to + b * d1, from + b * s1, (size_t)(n2 * row));
                continue;
            }
            for (int64_t c = 0; c < n2; c++) memcpy(to + b * d1 + c * d2, from + b * s1 + c * s2, (size_t)row);
        }
    }
    return 0;
}

/* dst[i, b, c, :] = src[index[i, c], b, c, :], index (n, n2) contiguous: every step c of a row from its own
   source row (a cache whose reorders were kept as an index, `TransformerState.ancestry`, laid out again).
   Returns 0, or 2 when an index lies outside [0, rows) (nothing copied). */
int attnlab_gather_steps(const char *src, int64_t rows, int64_t s0, int64_t s1, int64_t s2, char *dst, int64_t d0,
                         int64_t d1, int64_t d2, const int64_t *index, int64_t n, int64_t n1, int64_t n2, int64_t row) {
    for (int64_t i = 0; i < n * n2; i++)
        if (index[i] < 0 || index[i] >= rows) return 2;
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < n1; b++)
            for (int64_t c = 0; c < n2; c++)
                memcpy(dst + i * d0 + b * d1 + c * d2, src + index[i * n2 + c] * s0 + b * s1 + c * s2, (size_t)row);
    return 0;
}
