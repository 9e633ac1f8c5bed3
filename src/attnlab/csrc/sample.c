/* Sampling's step from the top k in one call (attnlab.decoding.search.Sampling): each row's k + 1 best logits
   (topk.h's selection, as `top_logits`), then the draw among the first k from softmax(values / temperature)
   with top-p, by the inverse of its distribution at a given uniform u:

     e[i] = exp(v[i] / T - v[0] / T)                               i < k, best first
     top-p: i is dropped when the mass of i and every less likely one, e[i..k-1] / sum e, is <= 1 - p
            (the likeliest always stays), as `TopP` over the k
     the token: the first i whose running sum of the kept e exceeds u * their total

   The (k + 1)-th value says whether a token ties with the k-th (`TopK` keeps every tied token, so such a row is
   left to the path over the whole vocabulary), as is a row with no finite value. */

#include "topk.h"

/* logits (n, V) with row stride ld, u (n,) in [0, 1) -> tok (n,) the drawn token, lp (n,) its log-probability
   (lp NULL: the logits stand for themselves, no log-sum-exp pass), fallback (n,) 1 where the row is left to the
   path over V. k + 1 <= min(V, 64). Returns 0; 1 when k is out of range; 2 without memory. */
int attnlab_sample_topk(const float *logits, int64_t ld, int64_t n, int64_t V, int64_t k, float temperature,
                        float top_p, const float *u, int64_t *tok, float *lp, int64_t *fallback) {
    if (k < 1 || k + 1 > V || k + 1 > 64) return 1;
    const int64_t k2 = k + 1;
    float *buf = malloc(sizeof(float) * (size_t)(n * (2 * k2 + 1)));
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(n * 2 * k2));
    if (buf == NULL || ids == NULL) {
        free(buf);
        free(ids);
        return 2;
    }
    float *cs = buf, *clp = buf + n * k2, *zero = buf + 2 * n * k2;
    int64_t *ct = ids, *cb = ids + n * k2;
    for (int64_t i = 0; i < n; i++) zero[i] = 0.0f;
    int status = beam_topk(logits, ld, n, 1, V, zero, k2, cs, ct, cb, clp, lp == NULL, NULL, NULL, NULL, NULL);
    for (int64_t i = 0; i < n && status == 0; i++) {
        const float *v = clp + i * k2;
        const int64_t *t = ct + i * k2;
        tok[i] = t[0];
        if (lp != NULL) lp[i] = v[0];
        fallback[i] = v[k] == v[k - 1] || !(v[0] > -INFINITY);
        if (fallback[i]) continue;
        float e[64], total = 0.0f;
        const float top = v[0] / temperature;
        for (int64_t j = 0; j < k; j++) total += e[j] = expf(v[j] / temperature - top);
        int64_t kept = k;
        if (top_p < 1.0f) { /* the mass of j and every less likely one, summed from the least likely up */
            float tail = 0.0f;
            for (int64_t j = k - 1; j > 0; j--) {
                tail += e[j] / total;
                if (tail <= 1.0f - top_p) kept = j;
                else break;
            }
        }
        float mass = 0.0f;
        for (int64_t j = 0; j < kept; j++) mass += e[j];
        const float target = u[i] * mass;
        float run = 0.0f;
        int64_t pick = kept - 1;
        for (int64_t j = 0; j < kept; j++) {
            run += e[j];
            if (run > target) {
                pick = j;
                break;
            }
        }
        tok[i] = t[pick];
        if (lp != NULL) lp[i] = v[pick];
    }
    free(buf);
    free(ids);
    return status;
}
