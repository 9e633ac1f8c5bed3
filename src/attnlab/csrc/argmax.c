/* Greedy's choice per row of the logits (B, V), in one read of each row instead of PyTorch's six
   operators (block maxima, their arg-max, a gather, an arg-max, a gather; logsumexp when scores are asked):

     attnlab_argmax_rows_f32:  out[b] = first index of the maximum of row b (a NaN, if any, is the maximum,
                               as in torch.argmax); lp[b] = row[out[b]] - logsumexp(row b), the chosen
                               token's log-probability, unless lp is NULL */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vec.h"

void attnlab_argmax_rows_f32(const float *x, int64_t B, int64_t V, int64_t ld, int64_t *out, float *lp) {
    for (int64_t b = 0; b < B; b++) {
        const float *row = x + b * ld;
        /* Per lane the maximum and where it first occurs (strictly greater replaces); x != x marks NaNs. */
        const vi lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        vf mv = splat(-INFINITY);
        vi at = {0}, nan = {0};
        int64_t v = 0;
        for (; v + W <= V; v += W) {
            const vf r = load(row + v);
            const vi gt = r > mv;
            nan |= r != r;
            mv = select(gt, r, mv);
            at = (gt & (lane + (int32_t)v)) | (~gt & at);
        }
        float m = -INFINITY;
        int64_t idx = 0;
        int any_nan = 0;
        for (int i = 0; i < W; i++) {
            any_nan |= nan[i] != 0;
            if (v > 0 && (mv[i] > m || (mv[i] == m && at[i] < idx))) {
                m = mv[i];
                idx = at[i];
            }
        }
        for (; v < V; v++) {
            any_nan |= row[v] != row[v];
            if (row[v] > m || v == 0) {
                m = row[v];
                idx = v;
            }
        }
        if (any_nan) { /* the first NaN is the maximum */
            idx = 0;
            while (row[idx] == row[idx]) idx++;
            m = NAN;
        }
        out[b] = idx;
        if (!lp) continue;
        if (any_nan || isinf(m)) { /* a row holding NaN, +inf, or only -inf: NaN, as PyTorch gives */
            lp[b] = NAN;
            continue;
        }
        vf sum = {0};
        for (v = 0; v + W <= V; v += W) sum += vexp(load(row + v) - m);
        float tail = 0.0f;
        for (; v < V; v++) tail += expf(row[v] - m);
        lp[b] = row[idx] - (m + logf(hsum(sum) + tail));
    }
}
