/* Constrained beam search's dealing (attnlab.decoding.constraints), per sentence in one call instead of some
   forty small PyTorch operators per step. For each of n sentences and its C candidates (score, beam, token,
   log-probability; -inf: none), with each hypothesis' progress id and the phrase table's rows:

     1. a (beam, token) met twice keeps its first place only;
     2. the candidates are ranked by score, best first (ties: the earlier place);
     3. each candidate's progress after its token: an <eos> keeps its hypothesis' progress; another token
        moves to the table's next id if the token is one of the progress' phrase tokens, else to its reset;
     4. valid candidates are dealt by (rank within their bank, fuller bank first), where a bank is the
        constraint tokens a progress has produced; the first k2 dealt are written in that order, then
        fillers (-inf, <eos>, beam 0, log-probability 0, the sentence's fresh progress).

   NaN scores are never dealt. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* Whether ranked candidate r is dealt before e: a lower rank within its bank, or the same and a fuller bank. */
static int before(const int64_t *rank, const int64_t *bk, int64_t r, int64_t e) {
    return rank[r] < rank[e] || (rank[r] == rank[e] && bk[r] > bk[e]);
}

/* cs, cb, ct, clp (n, C); st (n, K) progress ids; tokens, nxt (S, T), reset, bank (S,); fresh (n,) -> os, ot,
   ob, olp, oprog (n, k2). Returns 0; 1 when k2 is out of range or a beam or progress id is; 2 without memory. */
int attnlab_deal(int64_t n, int64_t K, int64_t C, const float *cs, const int64_t *cb,
                 const int64_t *ct, const float *clp, const int64_t *st, const int64_t *tokens,
                 const int64_t *nxt, int64_t T, const int64_t *reset, const int64_t *bank, int64_t S, int64_t eos,
                 const int64_t *fresh, int64_t k2, float *os, int64_t *ot, int64_t *ob, float *olp,
                 int64_t *oprog) {
    if (k2 < 1 || k2 > C) return 1;
    int64_t *work = malloc(sizeof(int64_t) * (size_t)(5 * C));
    if (work == NULL) return 2;
    int64_t *order = work, *after = work + C, *bk = work + 2 * C, *rank = work + 3 * C, *dealt = work + 4 * C;
    int status = 0;
    for (int64_t i = 0; i < n && status == 0; i++) {
        const float *s = cs + i * C;
        const int64_t *b = cb + i * C, *t = ct + i * C;
        /* 1-2: the valid first places, ranked by score (insertion sort: stable, C is a few dozen). */
        int64_t m = 0;
        for (int64_t c = 0; c < C; c++) {
            if (!(s[c] > -INFINITY)) continue;
            int seen = 0;
            for (int64_t e = 0; e < c && !seen; e++) seen = b[e] == b[c] && t[e] == t[c];
            if (seen) continue;
            int64_t p = m++;
            while (p > 0 && s[order[p - 1]] < s[c]) {
                order[p] = order[p - 1];
                p--;
            }
            order[p] = c;
        }
        /* 3: each one's progress and bank; 4: its rank within its bank. */
        for (int64_t r = 0; r < m; r++) {
            const int64_t c = order[r];
            if (b[c] < 0 || b[c] >= K) {
                status = 1;
                break;
            }
            const int64_t now = st[i * K + b[c]];
            if (now < 0 || now >= S) {
                status = 1;
                break;
            }
            int64_t to = now;
            if (t[c] != eos) {
                to = reset[now];
                for (int64_t j = 0; j < T; j++)
                    if (tokens[now * T + j] == t[c]) {
                        to = nxt[now * T + j];
                        break;
                    }
            }
            after[r] = to;
            bk[r] = bank[to];
            rank[r] = 0;
            for (int64_t e = 0; e < r; e++) rank[r] += bk[e] == bk[r];
        }
        if (status) break;
        /* The first k2 by (rank, fuller bank first), each inserted into the dealt list. */
        int64_t have = 0;
        for (int64_t r = 0; r < m; r++) {
            if (have == k2 && !before(rank, bk, r, dealt[k2 - 1])) continue;
            int64_t p = have < k2 ? have++ : k2 - 1;
            while (p > 0 && before(rank, bk, r, dealt[p - 1])) {
                dealt[p] = dealt[p - 1];
                p--;
            }
            dealt[p] = r;
        }
        for (int64_t q = 0; q < k2; q++) {
            const int64_t o = i * k2 + q;
            if (q < have) {
                const int64_t r = dealt[q], c = order[r];
                os[o] = s[c];
                ot[o] = t[c];
                ob[o] = b[c];
                olp[o] = clp[i * C + c];
                oprog[o] = after[r];
            } else {
                os[o] = -INFINITY;
                ot[o] = eos;
                ob[o] = 0;
                olp[o] = 0.0f;
                oprog[o] = fresh[i];
            }
        }
    }
    free(work);
    return status;
}
