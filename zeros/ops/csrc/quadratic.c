/* Causal ZeroS for short sequences, one head at a time: the forward and the hand-written
 * backward of zeros/ops/quadratic.py (_QuadZeroS) as plain loops, for the shapes where each
 * batched matmul of the torch path costs ~1 us per head whatever its size (T = 11, d = 4:
 * nine of them per step). Same maths, same reference max and shift; see quadratic.py for the
 * derivation. Arrays are contiguous: q, k, v, o [N, T, d]; s, a (sigma_h), g (sigma_1),
 * g0 (NULL without the zero-order term) [N, T]. Built by zeros/ops/native.py (ctypes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFINE(REAL, SUF)                                                                   \
static void scalars_##SUF(const REAL *s, const REAL *a, const REAL *g, const REAL *g0,      \
                          long T, REAL *e, REAL *st, REAL *S, REAL *P, REAL *c1, REAL *be,   \
                          REAL *ga) {                                                        \
    REAL M = s[0], accS = 0, accP = 0;                                                       \
    for (long t = 1; t < T; t++) if (s[t] > M) M = s[t];                                     \
    for (long t = 0; t < T; t++) {                                                           \
        REAL tt = (REAL)(t + 1);                                                             \
        st[t] = s[t] - s[0];                                                                 \
        e[t] = exp(s[t] - M);                                                                \
        accS += e[t]; accP += st[t];                                                         \
        S[t] = accS; P[t] = accP;                                                            \
        c1[t] = a[t] / accS;                                                                 \
        be[t] = (g[t] - a[t]) / tt;                                                          \
        ga[t] = -(be[t] * accP + a[t]) / tt + (g0 ? g0[t] / tt : 0);                         \
    }                                                                                        \
}                                                                                            \
                                                                                             \
void zeros_quad_fwd_##SUF(const REAL *q, const REAL *k, const REAL *v, const REAL *s,       \
                          const REAL *a, const REAL *g, const REAL *g0, REAL *o, long N,     \
                          long T, long d) {                                                  \
    REAL *buf = malloc(sizeof(REAL) * 7 * T);                                                \
    REAL *e = buf, *st = e + T, *S = st + T, *P = S + T, *c1 = P + T, *be = c1 + T,          \
         *ga = be + T;                                                                       \
    for (long n = 0; n < N; n++) {                                                           \
        const REAL *qn = q + n * T * d, *kn = k + n * T * d, *vn = v + n * T * d;            \
        REAL *on = o + n * T * d;                                                            \
        scalars_##SUF(s + n * T, a + n * T, g + n * T, g0 ? g0 + n * T : 0, T, e, st, S, P,  \
                      c1, be, ga);                                                           \
        memset(on, 0, sizeof(REAL) * T * d);                                                 \
        for (long t = 0; t < T; t++) {                                                       \
            const REAL *qt = qn + t * d;                                                     \
            REAL *ot = on + t * d;                                                           \
            for (long i = 0; i <= t; i++) {                                                  \
                const REAL *ki = kn + i * d, *vi = vn + i * d;                               \
                REAL qk = 0;                                                                 \
                for (long j = 0; j < d; j++) qk += qt[j] * ki[j];                            \
                REAL A = qk * (c1[t] * e[i] + be[t] * st[i] + ga[t]);                        \
                for (long j = 0; j < d; j++) ot[j] += A * vi[j];                             \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    free(buf);                                                                               \
}                                                                                            \
                                                                                             \
void zeros_quad_bwd_##SUF(const REAL *q, const REAL *k, const REAL *v, const REAL *s,       \
                          const REAL *a, const REAL *g, const REAL *g0, const REAL *dO,      \
                          REAL *dq, REAL *dk, REAL *dv, REAL *ds, REAL *da, REAL *dg,        \
                          REAL *dg0, long N, long T, long d) {                               \
    REAL *buf = malloc(sizeof(REAL) * 12 * T);                                               \
    REAL *e = buf, *st = e + T, *S = st + T, *P = S + T, *c1 = P + T, *be = c1 + T,          \
         *ga = be + T, *dc1 = ga + T, *dbe = dc1 + T, *dga = dbe + T, *de = dga + T,         \
         *dst = de + T;                                                                      \
    for (long n = 0; n < N; n++) {                                                           \
        long off = n * T * d;                                                                \
        const REAL *qn = q + off, *kn = k + off, *vn = v + off, *don = dO + off;             \
        REAL *dqn = dq + off, *dkn = dk + off, *dvn = dv + off;                              \
        scalars_##SUF(s + n * T, a + n * T, g + n * T, g0 ? g0 + n * T : 0, T, e, st, S, P,  \
                      c1, be, ga);                                                           \
        memset(dqn, 0, sizeof(REAL) * T * d);                                                \
        memset(dkn, 0, sizeof(REAL) * T * d);                                                \
        memset(dvn, 0, sizeof(REAL) * T * d);                                                \
        memset(dc1, 0, sizeof(REAL) * 5 * T);                                                \
        for (long t = 0; t < T; t++) {                                                       \
            const REAL *qt = qn + t * d, *dot = don + t * d;                                 \
            REAL *dqt = dqn + t * d;                                                         \
            for (long i = 0; i <= t; i++) {                                                  \
                const REAL *ki = kn + i * d, *vi = vn + i * d;                               \
                REAL *dki = dkn + i * d, *dvi = dvn + i * d;                                 \
                REAL qk = 0, dA = 0;                                                         \
                for (long j = 0; j < d; j++) { qk += qt[j] * ki[j]; dA += dot[j] * vi[j]; }  \
                REAL w = c1[t] * e[i] + be[t] * st[i] + ga[t];                               \
                REAL A = qk * w, dW = dA * qk, dQK = dA * w;                                 \
                for (long j = 0; j < d; j++) {                                               \
                    dvi[j] += A * dot[j];                                                    \
                    dqt[j] += dQK * ki[j];                                                   \
                    dki[j] += dQK * qt[j];                                                   \
                }                                                                            \
                dc1[t] += dW * e[i]; dbe[t] += dW * st[i]; dga[t] += dW;                     \
                de[i] += dW * c1[t]; dst[i] += dW * be[t];                                   \
            }                                                                                \
        }                                                                                    \
        /* the row scalars, as quadratic.py's backward; suffix sums run from the end */     \
        REAL sufS = 0, sufP = 0;                                                             \
        for (long t = T - 1; t >= 0; t--) {                                                  \
            REAL tt = (REAL)(t + 1);                                                         \
            REAL dS = -dc1[t] * c1[t] / S[t];                                                \
            REAL dbeta = dbe[t] - dga[t] * P[t] / tt;                                        \
            REAL dP = -dga[t] * be[t] / tt;                                                  \
            da[n * T + t] = dc1[t] / S[t] - dbeta / tt - dga[t] / tt;                        \
            dg[n * T + t] = dbeta / tt;                                                      \
            if (dg0) dg0[n * T + t] = dga[t] / tt;                                           \
            sufS += dS; sufP += dP;                                                          \
            ds[n * T + t] = (de[t] + sufS) * e[t] + dst[t] + sufP;                           \
        }                                                                                    \
    }                                                                                        \
    free(buf);                                                                               \
}

DEFINE(float, f32)
DEFINE(double, f64)
