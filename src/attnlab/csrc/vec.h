/* 16-float vectors for attnlab's C kernels (GCC/Clang vector extensions: one AVX-512 register, or two
   AVX2 ones, whatever -march=native offers), and e^x on them. Shared by the kernels that include it. */

#ifndef ATTNLAB_VEC_H
#define ATTNLAB_VEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
#define W 16

static inline vf load(const float *p) {
    vf x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void store(float *p, vf x) { memcpy(p, &x, sizeof x); }

static inline vf splat(float x) { return (vf){0} + x; }

typedef float vf8 __attribute__((vector_size(32)));
typedef float vf4 __attribute__((vector_size(16)));

/* x's lower eight lanes plus its upper eight. */
static inline vf8 fold8(vf x) {
    vf8 lo, hi;
    memcpy(&lo, &x, sizeof lo);
    memcpy(&hi, (const char *)&x + sizeof lo, sizeof hi);
    return lo + hi;
}

/* Sum of the lanes by halves (16 -> 8 -> 4 -> 1): register extracts, no trip through memory. */
static inline float hsum(vf x) {
    const vf8 lo = fold8(x);
    vf4 a, b;
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, (const char *)&lo + sizeof a, sizeof b);
    a += b;
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/* The sums of four vectors' lanes, [sum a, sum b, sum c, sum d], each added in hsum's order (so bit for bit
   hsum's), with the shuffles shared: about a third of the instructions of four hsums. */
static inline vf4 hsum4(vf a, vf b, vf c, vf d) {
    const vf8 a8 = fold8(a), b8 = fold8(b), c8 = fold8(c), d8 = fold8(d);
    /* [a 4, b 4] and [c 4, d 4]: each vector's lower half plus its upper half */
    const vf8 ab = __builtin_shufflevector(a8, b8, 0, 1, 2, 3, 8, 9, 10, 11) +
                   __builtin_shufflevector(a8, b8, 4, 5, 6, 7, 12, 13, 14, 15);
    const vf8 cd = __builtin_shufflevector(c8, d8, 0, 1, 2, 3, 8, 9, 10, 11) +
                   __builtin_shufflevector(c8, d8, 4, 5, 6, 7, 12, 13, 14, 15);
    /* [a0 + a2, a1 + a3, b0 + b2, ...] */
    const vf8 p = __builtin_shufflevector(ab, cd, 0, 1, 4, 5, 8, 9, 12, 13) +
                  __builtin_shufflevector(ab, cd, 2, 3, 6, 7, 10, 11, 14, 15);
    return __builtin_shufflevector(p, p, 0, 2, 4, 6) + __builtin_shufflevector(p, p, 1, 3, 5, 7);
}

typedef int32_t vi8 __attribute__((vector_size(32)));
typedef int32_t vi4 __attribute__((vector_size(16)));

/* The largest lane by halves, as hsum; a NaN lane may give any lane's value (the softmax keeps NaN out of
   its running maximum, int8's row pass flags NaN rows apart): faster one-query attention than a chain
   of 15 scalar compares. */
static inline float hmax(vf x) {
    vf8 lo, hi;
    memcpy(&lo, &x, sizeof lo);
    memcpy(&hi, (const char *)&x + sizeof lo, sizeof hi);
    const vi8 m8 = lo > hi;
    lo = (vf8)((m8 & (vi8)lo) | (~m8 & (vi8)hi));
    vf4 a, b;
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, (const char *)&lo + sizeof a, sizeof b);
    const vi4 m4 = a > b;
    a = (vf4)((m4 & (vi4)a) | (~m4 & (vi4)b));
    const float p = a[0] > a[2] ? a[0] : a[2], q = a[1] > a[3] ? a[1] : a[3];
    return p > q ? p : q;
}

static inline vf select(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }

/* e^x for x <= 0 (a softmax's shifted scores), Cephes' expf: range reduction by ln 2, degree-6 polynomial. */
static inline vf vexp(vf x) {
    x = select(x < splat(-87.33654f), splat(-87.33654f), x);
    vf fx = x * 1.44269504088896341f + 0.5f;
    vf t = __builtin_convertvector(__builtin_convertvector(fx, vi), vf); /* toward zero */
    fx = select(t > fx, t - 1.0f, t);                                    /* floor */
    x = x - fx * 0.693359375f - fx * -2.12194440e-4f;
    vf y = splat(1.9875691500e-4f);
    y = y * x + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * x * x + x + 1.0f;
    vi e = (__builtin_convertvector(fx, vi) + 127) << 23;
    return y * (vf)e;
}

#endif
