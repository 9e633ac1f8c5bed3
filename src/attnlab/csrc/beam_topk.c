/* One beam-search selection in one pass per row: log-softmax of each hypothesis' logits, plus its score, and
   the best k2 of every sentence's K * V candidates (fairseq's BeamSearch.step after a log_softmax):

     lp[t] = x[t] - max - log(sum exp(x - max)),  candidate b * V + t scores scores[b] + lp[t]

   Each row is read once for the largest of each 32-float block (and its exponential sum); the k2-th best block
   maximum bounds the k2-th best candidate from below, so a second pass scans only the few blocks that reach
   it, never the whole row one value at a time. Nothing of size (n * K, V) is written. Ties go to the lower
   candidate index; NaN candidates are never chosen.

   With `raw` the logits themselves stand for the log-probabilities (no maximum or exponential pass): sampling's
   top-k, whose draw over the k is the same for any row shift, and which asks for no log-probability. */

#include "topk.h"

/* `beam_topk` of topk.h (its comment says what each argument is). */
int attnlab_beam_topk(const float *logits, int64_t ld, int64_t n, int64_t K, int64_t V, const float *scores,
                      int64_t k2, float *cs, int64_t *ct, int64_t *cb, float *clp, int64_t raw, const int64_t *ban,
                      int64_t *rt, float *rlp, float *rl) {
    return beam_topk(logits, ld, n, K, V, scores, k2, cs, ct, cb, clp, raw, ban, rt, rlp, rl);
}
