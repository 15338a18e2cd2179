/* RoPE + unit norm of stacked q, k rows in one pass each way: the forward and backward of
 * zeros/rope.py (_RopeNormalize) as plain loops, instead of ~16 elementwise passes over the
 * [B, T, n, H, d] tensor. A row is one (b, t, j, h) vector of d = 2 G m channels: within each
 * of the G groups channel i pairs with i + m and both turn by the angle of cos/sin [T, G, m].
 * x and g are strided over (B, T, n, H) with unit stride over d; y and dx are written in the
 * layouts given by their strides; inv and keep [B, T, n, H] are row-major. */
#include <math.h>

#define DEFINE(REAL, SUF)                                                                   \
void zeros_rope_fwd_##SUF(const REAL *x, const long *xs, const REAL *cs, const REAL *sn,    \
                          REAL *y, const long *ys, REAL *inv, REAL *keep, long B, long T,    \
                          long n, long H, long G, long m, int normalize, double eps) {       \
    long d = 2 * G * m, r = 0;                                                               \
    for (long b = 0; b < B; b++) for (long t = 0; t < T; t++)                                \
    for (long j = 0; j < n; j++) for (long h = 0; h < H; h++, r++) {                         \
        const REAL *xr = x + b * xs[0] + t * xs[1] + j * xs[2] + h * xs[3];                  \
        REAL *yr = y + b * ys[0] + t * ys[1] + j * ys[2] + h * ys[3];                        \
        const REAL *c = cs + t * G * m, *s = sn + t * G * m;                                 \
        REAL acc = 0;                                                                        \
        for (long gi = 0; gi < G; gi++) {                                                    \
            const REAL *x1 = xr + gi * 2 * m, *x2 = x1 + m, *cg = c + gi * m, *sg = s + gi * m; \
            REAL *y1 = yr + gi * 2 * m, *y2 = y1 + m;                                        \
            for (long i = 0; i < m; i++) {                                                   \
                REAL a = x1[i] * cg[i] - x2[i] * sg[i], e = x2[i] * cg[i] + x1[i] * sg[i];   \
                y1[i] = a; y2[i] = e; acc += a * a + e * e;                                  \
            }                                                                                \
        }                                                                                    \
        if (normalize) {                                                                     \
            REAL nrm = sqrt(acc);                                                            \
            keep[r] = nrm > (REAL)eps;                                                       \
            REAL w = (REAL)1 / (nrm > (REAL)eps ? nrm : (REAL)eps);                          \
            inv[r] = w;                                                                      \
            for (long i = 0; i < d; i++) yr[i] *= w;                                         \
        }                                                                                    \
    }                                                                                        \
}                                                                                            \
                                                                                             \
void zeros_rope_bwd_##SUF(const REAL *g, const long *gs, const REAL *y, const long *ys,     \
                          const REAL *cs, const REAL *sn, const REAL *inv, const REAL *keep, \
                          REAL *dx, long B, long T, long n, long H, long G, long m,          \
                          int normalize) {                                                   \
    long d = 2 * G * m, r = 0;                                                               \
    REAL z[4096];                                                                            \
    for (long b = 0; b < B; b++) for (long t = 0; t < T; t++)                                \
    for (long j = 0; j < n; j++) for (long h = 0; h < H; h++, r++) {                         \
        const REAL *gr = g + b * gs[0] + t * gs[1] + j * gs[2] + h * gs[3];                  \
        const REAL *yr = y + b * ys[0] + t * ys[1] + j * ys[2] + h * ys[3];                  \
        REAL *dr = dx + r * d;                                                               \
        const REAL *c = cs + t * G * m, *s = sn + t * G * m;                                 \
        REAL dot = 0, w = 1;                                                                 \
        if (normalize) {                                                                     \
            for (long i = 0; i < d; i++) dot += gr[i] * yr[i];                               \
            dot *= keep[r]; w = inv[r];                                                      \
        }                                                                                    \
        for (long i = 0; i < d; i++) z[i] = gr[i] - dot * yr[i];                             \
        for (long gi = 0; gi < G; gi++) {                                                    \
            const REAL *z1 = z + gi * 2 * m, *z2 = z1 + m, *cg = c + gi * m, *sg = s + gi * m; \
            REAL *d1 = dr + gi * 2 * m, *d2 = d1 + m;                                        \
            for (long i = 0; i < m; i++) {                                                   \
                d1[i] = (z1[i] * cg[i] + z2[i] * sg[i]) * w;                                 \
                d2[i] = (z2[i] * cg[i] - z1[i] * sg[i]) * w;                                 \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
}

DEFINE(float, f32)
DEFINE(double, f64)
