/* The two gradients of the encoder pass's weighted copies (zeros/ops/encoder.py `_fold`) in
 * one pass over the rows: dx = sum_j w_j g_j and dw_j = g_j . x, for g [R, 3d] and w [R, 3]
 * row-major, x [B, H, N, d] strided over (B, H, N) with unit stride over d (a transposed view
 * of [B, N, H, d]); dx [R, d] and dw [R, 3] row-major, R = B H N. */
#define DEFINE(REAL, SUF)                                                                   \
void zeros_fold3_##SUF(const REAL *g, const REAL *w, const REAL *x, const long *xs, REAL *dx, \
                       REAL *dw, long B, long H, long N, long d) {                           \
    long r = 0;                                                                              \
    for (long b = 0; b < B; b++) for (long h = 0; h < H; h++) for (long n = 0; n < N; n++, r++) { \
        const REAL *g0 = g + r * 3 * d, *g1 = g0 + d, *g2 = g1 + d, *wr = w + 3 * r;         \
        const REAL *xr = x + b * xs[0] + h * xs[1] + n * xs[2];                              \
        REAL *dr = dx + r * d, a0 = 0, a1 = 0, a2 = 0;                                       \
        for (long i = 0; i < d; i++) {                                                       \
            dr[i] = wr[0] * g0[i] + wr[1] * g1[i] + wr[2] * g2[i];                           \
            a0 += g0[i] * xr[i]; a1 += g1[i] * xr[i]; a2 += g2[i] * xr[i];                   \
        }                                                                                    \
        dw[3 * r] = a0; dw[3 * r + 1] = a1; dw[3 * r + 2] = a2;                              \
    }                                                                                        \
}

DEFINE(float, f32)
DEFINE(double, f64)
