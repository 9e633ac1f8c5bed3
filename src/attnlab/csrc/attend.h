/* One query head of attention against n keys, for attnlab's C kernels (few_queries.c, int8_step.c):
   softmax(q k^T * scale) v with the query, the dot sums and the output in registers. Keys and values are
   fp32 or bf16 (widened as they are read); head sizes that are a multiple of 16 up to 128 run on 16-float
   vectors (`head_SUF_NC`), others on a plain loop (`head_SUF_any`). The softmax subtracts the row
   maximum, exponentiates (vec.h's vexp) and divides once at the end. */

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

/* One query against n keys, head size NC * W: query, dot sums and output in registers. */
#define DEFINE_HEAD(NC, SUF, KT)                                                                         \
    static void head_##SUF##_##NC(const float *q, const KT *k, int64_t kst, const KT *v, int64_t vst,      \
                                  int64_t n, float scale, float *s, float *o) {                           \
        vf qc[NC], acc[NC];                                                                              \
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
        const float l = softmax_numerators(s, n);                                                        \
        for (int c = 0; c < NC; c++) acc[c] = (vf){0};                                                   \
        for (t = 0; t < n; t++) {                                                                        \
            const vf p = splat(s[t]);                                                                    \
            for (int c = 0; c < NC; c++) acc[c] += p * load_##SUF(v + t * vst + c * W);                  \
        }                                                                                                \
        const float inv = n > 0 ? 1.0f / l : 0.0f; /* no visible key: zeros */                          \
        for (int c = 0; c < NC; c++) store(o + c * W, acc[c] * inv);                                     \
    }

/* Any head size. */
#define DEFINE_HEAD_ANY(SUF, KT)                                                                         \
    static void head_##SUF##_any(const float *q, const KT *k, int64_t kst, const KT *v, int64_t vst,       \
                                 int64_t n, int64_t Dh, float scale, float *s, float *o) {                \
        for (int64_t t = 0; t < n; t++) {                                                                \
            float a = 0.0f;                                                                              \
            for (int64_t d = 0; d < Dh; d++) a += q[d] * scalar_##SUF(k + t * kst + d);                  \
            s[t] = a * scale;                                                                            \
        }                                                                                                \
        const float l = softmax_numerators(s, n);                                                        \
        for (int64_t d = 0; d < Dh; d++) o[d] = 0.0f;                                                    \
        for (int64_t t = 0; t < n; t++)                                                                  \
            for (int64_t d = 0; d < Dh; d++) o[d] += s[t] * scalar_##SUF(v + t * vst + d);               \
        const float inv = n > 0 ? 1.0f / l : 0.0f;                                                       \
        for (int64_t d = 0; d < Dh; d++) o[d] *= inv;                                                    \
    }

/* The vector heads for head sizes 16..128 and the plain one, for keys/values of type KT; HEADS_SUF[Dh / W]
   is the vector head of a head size Dh that is a multiple of W (index 0 unused). */
#define DEFINE_HEADS(SUF, KT)                                                                            \
    DEFINE_HEAD(1, SUF, KT)                                                                              \
    DEFINE_HEAD(2, SUF, KT)                                                                              \
    DEFINE_HEAD(3, SUF, KT)                                                                              \
    DEFINE_HEAD(4, SUF, KT)                                                                              \
    DEFINE_HEAD(5, SUF, KT)                                                                              \
    DEFINE_HEAD(6, SUF, KT)                                                                              \
    DEFINE_HEAD(7, SUF, KT)                                                                              \
    DEFINE_HEAD(8, SUF, KT)                                                                              \
    DEFINE_HEAD_ANY(SUF, KT)                                                                             \
    typedef void (*head_##SUF##_fn)(const float *, const KT *, int64_t, const KT *, int64_t, int64_t, float, \
                                    float *, float *);                                                   \
    static const head_##SUF##_fn HEADS_##SUF[9] = {NULL,          head_##SUF##_1, head_##SUF##_2,         \
                                                   head_##SUF##_3, head_##SUF##_4, head_##SUF##_5,         \
                                                   head_##SUF##_6, head_##SUF##_7, head_##SUF##_8};

#endif
