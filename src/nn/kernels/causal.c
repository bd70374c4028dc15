/* Causal attention's matrix products for one sample and head (causal.h).
 *
 * Every product here is one shape: C (rows x cols) = alpha * sum over k in
 * [k0, k1) of A(r, k) B(k, :), where A is read through two strides (so the
 * same code reads p or p transposed) and B by rows.  A tile of 6 rows x
 * 16 columns keeps twelve 8-float accumulators in registers and adds one k
 * per round: 12 multiply-adds for 2 loads of B and 6 broadcasts of A (with
 * 4 x 16, eight chains, Zen 3 ran it at half the rate: each multiply-add
 * waits on the one before it in its chain); columns past the last whole
 * 16 take a scalar loop over the same sums in the same order. */
#include "causal.h"

#include "simd.h"
#include "transpose.h"

typedef float v8 __attribute__((vector_size(32)));
/* The same vector at any address (rows of qkv are 4-byte aligned). */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));

#define TILE_ROWS 6  /* 12 accumulators: enough multiply-adds in flight to hide their latency */
#define TILE_COLS 16

/* A(r, k) = a[r * a_row + k * a_k]; B(k, w) = b[k * ldb + w]. */
struct operands {
    const float *a, *b;
    long a_row, a_k, ldb;
};

/* rows is a constant at each call (always_inline), so acc stays in registers. */
static inline __attribute__((always_inline)) void tile_full(float *c, long ldc, const struct operands *o, int rows,
                                                            long k0, long k1, float alpha)
{
    v8 acc[TILE_ROWS][2] = {{{0}}};
    for (long k = k0; k < k1; k++) {
        const float *a = o->a + k * o->a_k, *b = o->b + k * o->ldb;
        const v8 b0 = *(const v8u *)b, b1 = *(const v8u *)(b + 8);
        for (int r = 0; r < rows; r++) {
            const float ar = a[r * o->a_row];
            acc[r][0] += ar * b0;
            acc[r][1] += ar * b1;
        }
    }
    for (int r = 0; r < rows; r++) {
        *(v8u *)(c + r * ldc) = alpha * acc[r][0];
        *(v8u *)(c + r * ldc + 8) = alpha * acc[r][1];
    }
}

static inline __attribute__((always_inline)) void tile_edge(float *c, long ldc, const struct operands *o, long rows,
                                                            long cols, long k0, long k1, float alpha)
{
    for (long r = 0; r < rows; r++)
        for (long w = 0; w < cols; w++) {
            float sum = 0;
            for (long k = k0; k < k1; k++)
                sum += o->a[r * o->a_row + k * o->a_k] * o->b[k * o->ldb + w];
            c[r * ldc + w] = alpha * sum;
        }
}

/* One block of up to TILE_ROWS rows: columns [0, cols) in tiles of 16. */
static inline __attribute__((always_inline)) void row_block(float *c, long ldc, struct operands o, long rows, long cols,
                                                            long k0, long k1, float alpha)
{
    long w = 0;
    for (; w + TILE_COLS <= cols; w += TILE_COLS, o.b += TILE_COLS)
        switch (rows) {
        case 6: tile_full(c + w, ldc, &o, 6, k0, k1, alpha); break;
        case 5: tile_full(c + w, ldc, &o, 5, k0, k1, alpha); break;
        case 4: tile_full(c + w, ldc, &o, 4, k0, k1, alpha); break;
        case 3: tile_full(c + w, ldc, &o, 3, k0, k1, alpha); break;
        case 2: tile_full(c + w, ldc, &o, 2, k0, k1, alpha); break;
        default: tile_full(c + w, ldc, &o, 1, k0, k1, alpha); break;
        }
    if (w < cols)
        tile_edge(c + w, ldc, &o, rows, cols - w, k0, k1, alpha);
}

ST_MULTIVERSION void causal_scores(float *s, long t, long d, float alpha, const float *a, long lda, const float *b,
                                   long ldb, float *bt)
{
    nn_transpose(bt, t, b, ldb, t, d, NULL);
    for (long i = 0; i < t; i += TILE_ROWS) {
        const long rows = t - i < TILE_ROWS ? t - i : TILE_ROWS, last = i + rows - 1;
        /* columns up to the block's last row's diagonal, whole tiles */
        const long cols = (last / TILE_COLS + 1) * TILE_COLS < t ? (last / TILE_COLS + 1) * TILE_COLS : t;
        const struct operands o = {.a = a + i * lda, .b = bt, .a_row = lda, .a_k = 1, .ldb = t};
        row_block(s + i * t, t, o, rows, cols, 0, d, alpha);
    }
}

ST_MULTIVERSION void causal_mix(float *y, long ldy, const float *p, long t, long d, const float *v, long ldv)
{
    for (long i = 0; i < t; i += TILE_ROWS) {
        const long rows = t - i < TILE_ROWS ? t - i : TILE_ROWS;
        const struct operands o = {.a = p + i * t, .b = v, .a_row = t, .a_k = 1, .ldb = ldv};
        row_block(y + i * ldy, ldy, o, rows, d, 0, i + rows, 1.0f);
    }
}

ST_MULTIVERSION void causal_mix_t(float *y, long ldy, const float *p, long t, long d, const float *v, long ldv)
{
    for (long j = 0; j < t; j += TILE_ROWS) {
        const long rows = t - j < TILE_ROWS ? t - j : TILE_ROWS;
        const struct operands o = {.a = p + j, .b = v, .a_row = 1, .a_k = t, .ldb = ldv};
        row_block(y + j * ldy, ldy, o, rows, d, j, t, 1.0f);
    }
}
