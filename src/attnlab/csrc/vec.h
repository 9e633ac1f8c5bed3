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

/* Sum of the lanes by halves (16 -> 8 -> 4 -> 1): register extracts, no trip through memory. */
static inline float hsum(vf x) {
    vf8 lo, hi;
    memcpy(&lo, &x, sizeof lo);
    memcpy(&hi, (const char *)&x + sizeof lo, sizeof hi);
    lo += hi;
    vf4 a, b;
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, (const char *)&lo + sizeof a, sizeof b);
    a += b;
    return (a[0] + a[2]) + (a[1] + a[3]);
}

typedef int32_t vi8 __attribute__((vector_size(32)));
typedef int32_t vi4 __attribute__((vector_size(16)));

/* The largest lane by halves, as hsum; a NaN lane may give any lane's value (the softmax keeps NaN out of
   its running maximum, int8's row pass flags NaN rows apart). 3% faster one-query attention than a chain
   of 15 scalar compares (B 256, 12 keys). */
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
