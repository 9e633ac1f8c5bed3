/* One beam-search selection in one pass per row: log-softmax of each hypothesis' logits, plus its score, and
   the best k2 of every sentence's K * V candidates (fairseq's BeamSearch.step after a log_softmax):

     lp[t] = x[t] - max - log(sum exp(x - max)),  candidate b * V + t scores scores[b] + lp[t]

   Each row is read for its maximum and exponential sum, then block by block against the running k2-th best
   (a block's maximum rejects almost every block), never written: no (n * K, V) log-probabilities in memory.
   Ties go to the lower candidate index; NaN candidates are never chosen.

   With `raw` the logits themselves stand for the log-probabilities (no maximum or exponential pass): sampling's
   top-k, whose draw over the k is the same for any row shift, and which asks for no log-probability. */

#include "vec.h"

/* max + log(sum exp(x - max)) of x[0, V); -inf for a row of -inf. */
static float row_lse(const float *x, int64_t V) {
    vf mv = splat(-INFINITY);
    int64_t t = 0;
    for (; t + W <= V; t += W) {
        const vf v = load(x + t);
        mv = select(v > mv, v, mv);
    }
    float m = hmax(mv);
    for (; t < V; t++) m = x[t] > m ? x[t] : m;
    if (m == -INFINITY) return m;
    vf sv = {0};
    for (t = 0; t + W <= V; t += W) sv += vexp(load(x + t) - m);
    float s = hsum(sv);
    for (; t < V; t++) {
        vf e = vexp(splat(x[t] - m));
        s += e[0];
    }
    return m + logf(s);
}

/* Insert (v, i) into the sorted best list (val, idx) of *have <= k entries; ties after the equal ones. */
static void insert(float *val, int64_t *idx, int64_t *have, int64_t k, float v, int64_t i) {
    int64_t p = *have < k ? (*have)++ : k - 1;
    while (p > 0 && val[p - 1] < v) {
        val[p] = val[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    val[p] = v;
    idx[p] = i;
}

/* Row b's candidates s + (x[t] - l) for t in [t0, t1), one at a time, into the best list (NaN never). */
static void scan(const float *x, int64_t t0, int64_t t1, float s, float l, int64_t base, float *val, int64_t *idx,
                 int64_t *have, int64_t k2) {
    for (int64_t t = t0; t < t1; t++) {
        const float c = s + (x[t] - l);
        if (c == c && (*have < k2 || c > val[k2 - 1])) insert(val, idx, have, k2, c, base + t);
    }
}

/* The largest of x[t, t + B) (B = 4 vectors), NaN lanes left out: rounding is monotonic, so no candidate of
   the block beats the list's worst unless s + (this - l) does. */
#define B (4 * W)
static float block_max(const float *x) {
    vf m = splat(-INFINITY);
    for (int j = 0; j < B; j += W) {
        const vf v = load(x + j);
        m = select(v > m, v, m);
    }
    return hmax(m);
}

/* logits (n * K, V) with row stride ld, scores (n, K) -> the best k2 (<= K * V) candidates of each sentence,
   best first: their scores cs, tokens ct, beams cb and the token's log-probability clp, each (n, k2).
   A hypothesis whose score is no better than a full list's worst is skipped whole (its log-probabilities are
   <= 0, so none of its candidates could enter); with the list full, each block of 4 vectors is read once for
   its maximum and scanned only when that could enter. With `raw`, lp[t] is x[t] (see the top). Returns 0, or 1
   when k2 is out of range (nothing written). */
int attnlab_beam_topk(const float *logits, int64_t ld, int64_t n, int64_t K, int64_t V, const float *scores,
                      int64_t k2, float *cs, int64_t *ct, int64_t *cb, float *clp, int64_t raw) {
    if (k2 < 1 || k2 > K * V || k2 > 64) return 1;
    float lse[256];
    for (int64_t i = 0; i < n; i++) {
        float *val = cs + i * k2;
        int64_t *idx = ct + i * k2, have = 0;
        for (int64_t b = 0; b < K; b++) {
            const float *x = logits + (i * K + b) * ld;
            const float s = scores[i * K + b];
            if (!raw && have == k2 && !(s > val[k2 - 1])) continue; /* none of its candidates can enter */
            const float l = raw ? 0.0f : row_lse(x, V);
            if (b < 256) lse[b] = l;
            int64_t t = 0;
            while (t < V) {
                if (have < k2 || t + B > V) { /* filling the list, or the row's tail: one at a time */
                    const int64_t end = have < k2 ? t + 1 : V;
                    scan(x, t, end, s, l, b * V, val, idx, &have, k2);
                    t = end;
                    continue;
                }
                const float c = s + (block_max(x + t) - l);
                if (!(c <= val[k2 - 1])) scan(x, t, t + B, s, l, b * V, val, idx, &have, k2); /* NaN: scan too */
                t += B;
            }
        }
        for (int64_t r = 0; r < k2; r++) {
            if (r >= have) { /* fewer than k2 candidates that are not NaN */
                val[r] = -INFINITY;
                idx[r] = 0;
            }
            const int64_t b = idx[r] / V, tok = idx[r] % V;
            cb[i * k2 + r] = b;
            ct[i * k2 + r] = tok;
            const float *x = logits + (i * K + b) * ld;
            clp[i * k2 + r] = raw ? x[tok] : x[tok] - (b < 256 ? lse[b] : row_lse(x, V));
        }
    }
    return 0;
}
