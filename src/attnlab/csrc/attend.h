/* Attention of one query against n keys, every head, for attnlab's C kernels (few_queries.c, int8_step.c):
   softmax(q k^T * scale) v (`query_SUF`). Keys and values are fp32 or bf16 (widened as they are read); head
   sizes that are a multiple of 16 up to 128 run on 16-float vectors, others on a plain loop. The softmax
   subtracts the row maximum, exponentiates (vec.h's vexp) and divides once at the end. */

#ifndef ATTNLAB_ATTEND_H
#define ATTNLAB_ATTEND_H

#include "vec.h"

/* exp(s - max) in place over s[0, n), lanes up to the next multiple of W zeroed (the buffer holds them);
   returns the sum. */
static float softmax_numerators(float *s, int64_t n) {
    const vi lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    vf mv = splat(-INFINITY);
    for (int64_t t = 0; t < n; t += W) {
        const vi valid = lane < (vi){0} + (int32_t)(n - t);
        mv = select(valid & (load(s + t) > mv), load(s + t), mv);
    }
    const float m = hmax(mv);
    vf sum = {0};
    for (int64_t t = 0; t < n; t += W) {
        const vi valid = lane < (vi){0} + (int32_t)(n - t);
        const vf e = select(valid, vexp(load(s + t) - m), (vf){0});
        store(s + t, e);
        sum += e;
    }
    return hsum(sum);
}

/* Keys and values as stored: fp32, or bf16 (the upper half of an fp32: widened by a shift). */
static inline vf load_f32(const float *p) { return load(p); }
static inline float scalar_f32(const float *p) { return *p; }

typedef uint16_t vu16 __attribute__((vector_size(32)));
typedef uint32_t vu32 __attribute__((vector_size(64)));

static inline vf load_bf16(const uint16_t *p) {
    vu16 h;
    memcpy(&h, p, sizeof h);
    const vu32 w = __builtin_convertvector(h, vu32) << 16;
    vf f;
    memcpy(&f, &w, sizeof f);
    return f;
}

static inline float scalar_bf16(const uint16_t *p) {
    const uint32_t w = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

/* One head's scores and pooling, head size NC * W, the query and the output in registers:
     scores_SUF_NC: s[t] = q . k[t] * scale for t < n
     pool_SUF_NC:   o = inv * sum_t s[t] v[t]  (s holding the softmax's numerators, inv 1 / their sum) */
#define DEFINE_HEAD(NC, SUF, KT)                                                                         \
    static void scores_##SUF##_##NC(const float *q, const KT *k, int64_t kst, int64_t n, float scale, float *s) { \
        vf qc[NC];                                                                                       \
        for (int c = 0; c < NC; c++) qc[c] = load(q + c * W);                                            \
        int64_t t = 0;                                                                                   \
        for (; t + 4 <= n; t += 4) {                                                                     \
            vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                                   \
            for (int c = 0; c < NC; c++) {                                                               \
                a0 += qc[c] * load_##SUF(k + t * kst + c * W);                                           \
                a1 += qc[c] * load_##SUF(k + (t + 1) * kst + c * W);                                     \
                a2 += qc[c] * load_##SUF(k + (t + 2) * kst + c * W);                                     \
                a3 += qc[c] * load_##SUF(k + (t + 3) * kst + c * W);                                     \
            }                                                                                            \
            const vf4 d = hsum4(a0, a1, a2, a3) * scale;                                                 \
            memcpy(s + t, &d, sizeof d);                                                                 \
        }                                                                                                \
        for (; t < n; t++) {                                                                             \
            vf a = {0};                                                                                  \
            for (int c = 0; c < NC; c++) a += qc[c] * load_##SUF(k + t * kst + c * W);                   \
            s[t] = hsum(a) * scale;                                                                      \
        }                                                                                                \
    }                                                                                                    \
    static void pool_##SUF##_##NC(const float *s, const KT *v, int64_t vst, int64_t n, float inv, float *o) { \
        vf acc[NC];                                                                                      \
        for (int c = 0; c < NC; c++) acc[c] = (vf){0};                                                   \
        for (int64_t t = 0; t < n; t++) {                                                                \
            const vf p = splat(s[t]);                                                                    \
            for (int c = 0; c < NC; c++) acc[c] += p * load_##SUF(v + t * vst + c * W);                  \
        }                                                                                                \
        for (int c = 0; c < NC; c++) store(o + c * W, acc[c] * inv);                                     \
    }

/* All H heads of one query against n keys, any head size Dh (vector heads where Dh is a multiple of W up
   to 128): every head's scores, then every head's softmax, then the pooling. The softmaxes are independent,
   so the CPU overlaps their exp chains, where one head at a time waited on its own (BENCHMARKS.md,
   "int8's fused step"). Query head h reads KV head h / G; s holds H * padded + H floats (padded >= n,
   a multiple of W); o (H, Dh). A query that sees no key (n = 0) gives zeros. */
#define DEFINE_HEADS(SUF, KT)                                                                            \
    DEFINE_HEAD(1, SUF, KT)                                                                              \
    DEFINE_HEAD(2, SUF, KT)                                                                              \
    DEFINE_HEAD(3, SUF, KT)                                                                              \
    DEFINE_HEAD(4, SUF, KT)                                                                              \
    DEFINE_HEAD(5, SUF, KT)                                                                              \
    DEFINE_HEAD(6, SUF, KT)                                                                              \
    DEFINE_HEAD(7, SUF, KT)                                                                              \
    DEFINE_HEAD(8, SUF, KT)                                                                              \
    static void scores_##SUF##_any(const float *q, const KT *k, int64_t kst, int64_t n, int64_t Dh, float scale, \
                                   float *s) {                                                           \
        for (int64_t t = 0; t < n; t++) {                                                                \
            float a = 0.0f;                                                                              \
            for (int64_t d = 0; d < Dh; d++) a += q[d] * scalar_##SUF(k + t * kst + d);                  \
            s[t] = a * scale;                                                                            \
        }                                                                                                \
    }                                                                                                    \
    static void pool_##SUF##_any(const float *s, const KT *v, int64_t vst, int64_t n, int64_t Dh, float inv, \
                                 float *o) {                                                             \
        for (int64_t d = 0; d < Dh; d++) o[d] = 0.0f;                                                    \
        for (int64_t t = 0; t < n; t++)                                                                  \
            for (int64_t d = 0; d < Dh; d++) o[d] += s[t] * scalar_##SUF(v + t * vst + d);               \
        for (int64_t d = 0; d < Dh; d++) o[d] *= inv;                                                    \
    }                                                                                                    \
    typedef void (*scores_##SUF##_fn)(const float *, const KT *, int64_t, int64_t, float, float *);      \
    typedef void (*pool_##SUF##_fn)(const float *, const KT *, int64_t, int64_t, float, float *);        \
    static const scores_##SUF##_fn SCORES_##SUF[9] = {NULL, scores_##SUF##_1, scores_##SUF##_2,           \
        scores_##SUF##_3, scores_##SUF##_4, scores_##SUF##_5, scores_##SUF##_6, scores_##SUF##_7,        \
        scores_##SUF##_8};                                                                               \
    static const pool_##SUF##_fn POOLS_##SUF[9] = {NULL, pool_##SUF##_1, pool_##SUF##_2, pool_##SUF##_3,  \
        pool_##SUF##_4, pool_##SUF##_5, pool_##SUF##_6, pool_##SUF##_7, pool_##SUF##_8};                 \
    static void query_##SUF(const float *q, int64_t qsh, const KT *k, int64_t ksh, int64_t kst, const KT *v, \
                            int64_t vsh, int64_t vst, int64_t H, int64_t G, int64_t Dh, int64_t n, float scale, \
                            float *s, int64_t padded, float *o) {                                        \
        const int nc = Dh % W == 0 && Dh / W <= 8 ? (int)(Dh / W) : 0;                                   \
        float *inv = s + H * padded;                                                                     \
        for (int64_t h = 0; h < H; h++) {                                                                \
            if (nc)                                                                                      \
                SCORES_##SUF[nc](q + h * qsh, k + h / G * ksh, kst, n, scale, s + h * padded);           \
            else                                                                                         \
                scores_##SUF##_any(q + h * qsh, k + h / G * ksh, kst, n, Dh, scale, s + h * padded);     \
        }                                                                                                \
        for (int64_t h = 0; h < H; h++) {                                                                \
            const float l = softmax_numerators(s + h * padded, n);                                       \
            inv[h] = n > 0 ? 1.0f / l : 0.0f; /* no visible key: zeros */                                \
        }                                                                                                \
        for (int64_t h = 0; h < H; h++) {                                                                \
            if (nc)                                                                                      \
                POOLS_##SUF[nc](s + h * padded, v + h / G * vsh, vst, n, inv[h], o + h * Dh);            \
            else                                                                                         \
                pool_##SUF##_any(s + h * padded, v + h / G * vsh, vst, n, Dh, inv[h], o + h * Dh);       \
        }                                                                                                \
    }

#endif
