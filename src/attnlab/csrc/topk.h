/* Beam search's selection, shared by beam_topk.c (beam search, constrained beam search, sampling's top-k) and
   sample.c (sampling's draw from the top k): `beam_topk` below, and the row passes it is made of. */

#ifndef ATTNLAB_TOPK_H
#define ATTNLAB_TOPK_H

#include <stdlib.h>

#include "vec.h"



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

/* Bit i set where lane i of m is true (-1): the lanes ORed by halves, as hsum adds them. */
static inline int lane_bits(vi m) {
    const vi bit = {1 << 0, 1 << 1, 1 << 2,  1 << 3,  1 << 4,  1 << 5,  1 << 6,  1 << 7,
                    1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15};
    const vi b = m & bit;
    vi8 lo, hi;
    memcpy(&lo, &b, sizeof lo);
    memcpy(&hi, (const char *)&b + sizeof lo, sizeof hi);
    lo |= hi;
    vi4 a, c;
    memcpy(&a, &lo, sizeof a);
    memcpy(&c, (const char *)&lo + sizeof a, sizeof c);
    a |= c;
    return (int)(a[0] | a[1] | a[2] | a[3]);
}

/* Row b's candidates s + (x[t] - l) for t in [t0, t1) that reach T, in index order, into the best list (NaN and
   the banned token never). One that falls short of T cannot be chosen (at least k2 candidates reach it), so a
   vector compare per W tokens finds the few to insert, rather than a test per token. */
static void scan(const float *x, int64_t t0, int64_t t1, int64_t ban, float s, float l, float T, int64_t base,
                 float *val, int64_t *idx, int64_t *have, int64_t k2) {
    int64_t t = t0;
    for (; t + W <= t1; t += W) {
        for (int bits = lane_bits(splat(s) + (load(x + t) - splat(l)) >= splat(T)); bits; bits &= bits - 1) {
            const int64_t u = t + __builtin_ctz((unsigned)bits);
            const float c = s + (x[u] - l); /* the lane's value, bit for bit */
            if (u != ban && (*have < k2 || c > val[k2 - 1])) insert(val, idx, have, k2, c, base + u);
        }
    }
    for (; t < t1; t++) {
        const float c = s + (x[t] - l);
        if (c >= T && t != ban && (*have < k2 || c > val[k2 - 1])) insert(val, idx, have, k2, c, base + t);
    }
}

/* The largest of each BW-float block of row x (the tail's own), NaN lanes left out, into bm; returns the row's
   largest (-inf for a row of -inf or NaN). */
#define BW (8 * W)
static float block_maxima(const float *x, int64_t V, float *bm) {
    float m = -INFINITY;
    int64_t t = 0, j = 0;
    for (; t + BW <= V; t += BW, j++) {
        const vf a = load(x + t);
        vf r = select(a == a, a, splat(-INFINITY)); /* NaN lanes out: c > NaN never holds */
        for (int64_t w = W; w < BW; w += W) {
            const vf c = load(x + t + w);
            r = select(c > r, c, r);
        }
        const float b = hmax(r);
        bm[j] = b;
        m = b > m ? b : m;
    }
    if (t < V) {
        vf r = splat(-INFINITY);
        for (; t + W <= V; t += W) {
            const vf c = load(x + t);
            r = select(c > r, c, r);
        }
        float b = hmax(r);
        for (; t < V; t++) b = x[t] > b ? x[t] : b;
        bm[j] = b;
        m = b > m ? b : m;
    }
    return m;
}

/* The largest of x[t0, t1) but x[ban] (NaN left out; -inf if none). */
static float max_without(const float *x, int64_t t0, int64_t t1, int64_t ban) {
    float b = -INFINITY;
    for (int64_t t = t0; t < t1; t++)
        if (t != ban && x[t] > b) b = x[t];
    return b;
}

/* The first token of row x whose value is the largest block maximum of bm (nb blocks), x[ban] left out; -1 for a
   row with none (every value -inf, NaN or banned). */
static int64_t row_best(const float *x, int64_t V, const float *bm, int64_t nb, int64_t ban) {
    float top = -INFINITY;
    int64_t jb = -1;
    for (int64_t j = 0; j < nb; j++)
        if (bm[j] > top) top = bm[j], jb = j;
    if (jb < 0) return -1;
    const int64_t t1 = (jb + 1) * BW < V ? (jb + 1) * BW : V;
    for (int64_t t = jb * BW; t < t1; t++)
        if (t != ban && x[t] == top) return t;
    return -1;
}

/* log(sum exp(x - m)) + m of x[0, V) whose largest is m; -inf for a row of -inf. */
static float row_lse_max(const float *x, int64_t V, float m) {
    if (m == -INFINITY) return m;
    vf sv = {0};
    int64_t t = 0;
    for (; t + W <= V; t += W) sv += vexp(load(x + t) - m);
    float s = hsum(sv);
    for (; t < V; t++) {
        vf e = vexp(splat(x[t] - m));
        s += e[0];
    }
    return m + logf(s);
}

/* logits (n * K, V) with row stride ld, scores (n, K) -> the best k2 (<= K * V) candidates of each sentence,
   best first: their scores cs, tokens ct, beams cb and the token's log-probability clp, each (n, k2).

   Two passes per sentence. The first reads each hypothesis' row once for the largest of every BW-float block
   (and, without `raw`, its log-sum-exp) and keeps the k2 best block maxima as candidates, s + (max - l): they
   are k2 distinct candidates, so the k2-th of them, T, is no better than the sentence's k2-th best, and every
   candidate that can be chosen lies in a block whose candidate maximum reaches T. The second scans only those
   blocks (about k2 of V / BW), in index order, into the best list. Without `raw`, a hypothesis whose score is
   no better than a full list of block maxima is skipped whole (its log-probabilities are <= 0: its candidates
   could at best tie k2 earlier ones, which win ties). With `raw`, lp[t] is x[t] (see the top).

   Constrained beam search asks for more, where `ban` is not NULL: row r's token ban[r] (-1: none) is never a
   candidate (a banned <eos>; it still counts in the log-sum-exp, as a ban leaves the others as they are), and
   every row's own best token, its log-probability and the row's log-sum-exp go to rt, rlp, rl (n * K each; no
   row skipped; a row with no candidate: token 0, -inf). Returns 0; 1 when k2 is out of range, 2 when the block
   maxima find no memory (nothing written). */
static int beam_topk(const float *logits, int64_t ld, int64_t n, int64_t K, int64_t V, const float *scores, int64_t k2,
                     float *cs, int64_t *ct, int64_t *cb, float *clp, int64_t raw, const int64_t *ban, int64_t *rt,
                     float *rlp, float *rl) {
    if (k2 < 1 || k2 > K * V || k2 > 64) return 1;
    const int64_t nb = (V + BW - 1) / BW;
    float *bm = malloc(sizeof(float) * (size_t)(K * nb + K));
    if (bm == NULL) return 2;
    float *lse = bm + K * nb; /* each hypothesis' log-sum-exp; NAN: skipped */
    for (int64_t i = 0; i < n; i++) {
        float tv[64];
        int64_t ti[64], th = 0; /* the best k2 block maxima as candidates */
        for (int64_t b = 0; b < K; b++) {
            const int64_t r = i * K + b, out = ban == NULL ? -1 : ban[r];
            const float *x = logits + r * ld;
            const float s = scores[r];
            lse[b] = NAN;
            if (ban == NULL && !raw && th == k2 && !(s > tv[k2 - 1])) continue; /* none of its candidates wins */
            float *m = bm + b * nb;
            const float top = block_maxima(x, V, m);
            const float l = raw ? 0.0f : row_lse_max(x, V, top);
            lse[b] = l;
            if (out >= 0 && out < V) { /* its block's maximum without it */
                const int64_t j = out / BW;
                m[j] = max_without(x, j * BW, (j + 1) * BW < V ? (j + 1) * BW : V, out);
            }
            if (ban != NULL) {
                const int64_t t = row_best(x, V, m, nb, out);
                rt[r] = t < 0 ? 0 : t;
                rlp[r] = t < 0 ? -INFINITY : raw ? x[t] : x[t] - l;
                rl[r] = l;
            }
            for (int64_t j = 0; j < nb; j++) {
                const float c = s + (m[j] - l);
                if (c == c && (th < k2 || c > tv[k2 - 1])) insert(tv, ti, &th, k2, c, b * nb + j);
            }
        }
        const float T = th == k2 ? tv[k2 - 1] : -INFINITY;
        float *val = cs + i * k2;
        int64_t *idx = ct + i * k2, have = 0;
        for (int64_t b = 0; b < K; b++) {
            const float l = lse[b], s = scores[i * K + b];
            if (l != l) continue;
            const float *x = logits + (i * K + b) * ld, *m = bm + b * nb;
            const int64_t out = ban == NULL ? -1 : ban[i * K + b];
            for (int64_t j = 0; j < nb; j++) {
                if (!(s + (m[j] - l) >= T)) continue; /* NaN or no candidate reaching T */
                const int64_t t0 = j * BW, t1 = t0 + BW < V ? t0 + BW : V;
                scan(x, t0, t1, out, s, l, T, b * V, val, idx, &have, k2);
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
            clp[i * k2 + r] = r >= have ? -INFINITY : raw ? x[tok] : x[tok] - lse[b]; /* none: -inf */
        }
    }
    free(bm);
    return 0;
}

#endif
