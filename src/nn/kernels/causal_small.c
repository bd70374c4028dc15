/* Causal attention of a short-context head in AVX-512 registers
 * (causal_small.h).
 *
 * A block is ROWS queries.  Its scores are ROWS x 16-column tiles of 4
 * vectors (24 accumulators) over the head's dimensions, K^T's row a
 * dimension's broadcast partner, up to the block's last query's diagonal;
 * a query past the head's last is computed as the last one (its row read
 * again) and never stored, so every tile has ROWS rows.  The mixes (Y = P V,
 * dQ = dS K) keep ROWS x hs/16 accumulators over keys in order; dK = dS^T Q
 * and dV = P^T dY keep ROWS keys' rows over queries in order.  A row's
 * entries right of its diagonal, up to its block's last vector, are zeros
 * in P and dS, so those terms add nothing; the blocks of keys and of
 * queries are the same ROWS apart, so a key block reads a query's row no
 * further than its block's last diagonal. */
#include "causal_small.h"

#include <math.h>
#include <string.h>

#include "transpose.h"

enum { ROWS = 6, CHUNK = 4, LANES = 16 };

static long padded(long t) { return (t + LANES - 1) / LANES * LANES; }

/* A thread's scratch: K^T and V^T (hs x tp), P and dS (rows x tp). */
struct bufs {
    float *kt, *vt, *p, *ds;
};

static size_t carve(long t, long hs, float *base, struct bufs *b)
{
    const size_t tp = (size_t)padded(t), rows = (size_t)((t + ROWS - 1) / ROWS * ROWS), head = (size_t)hs * tp;
    *b = (struct bufs){base, base + head, base + 2 * head, base + 2 * head + rows * tp};
    return 2 * head + 2 * rows * tp;
}

size_t causal_small_scratch_bytes(long t, long hs)
{
    struct bufs b;
    return carve(t, hs, NULL, &b) * sizeof(float);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE AVX512 static inline __attribute__((always_inline))

static long min_of(long a, long b) { return a < b ? a : b; }

/* dst (hs x tp) = src's t rows transposed, zeros past column t, so the
 * scores' tiles past the last key read numbers. */
static void transpose_padded(float *dst, long tp, const float *src, long ld, long t, long hs)
{
    nn_transpose(dst, tp, src, ld, t, hs, NULL);
    for (long d = 0; d < hs && t < tp; d++)
        memset(dst + d * tp + t, 0, (size_t)(tp - t) * sizeof *dst);
}

bool causal_small_fits(long t, long hs)
{
    return __builtin_cpu_supports("avx512f") && hs >= LANES && hs <= 4 * LANES && hs % LANES == 0 && t >= 1 &&
           t <= CAUSAL_SMALL_MAX_T;
}

/* nn_expf (simd.h) on 16 lanes: the same clamp, reduction and polynomial. */
INLINE __m512 exp16(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 big = _mm512_set1_ps(12582912.0f);
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), big), big);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i scale = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(scale));
}

/* The lanes of vector v (keys 16 v ..) that query i attends to. */
static __mmask16 counted(long v, long i)
{
    const long from = v * LANES;
    return i >= from + LANES - 1 ? (__mmask16)0xffff : i < from ? 0 : (__mmask16)((1u << (i - from + 1)) - 1);
}

/* e^(score - max) of vector v of query i's row, zero where it does not
 * attend: the forward pass and backward's P again share it, so their bits. */
INLINE __m512 weight_unscaled(const float *row, long v, long i, float mx)
{
    const __m512 shifted = _mm512_sub_ps(_mm512_loadu_ps(row + v * LANES), _mm512_set1_ps(mx));
    return _mm512_maskz_mov_ps(counted(v, i), exp16(shifted));
}

/* x rounded to the nearest bf16 value (ties to even), kept in fp32: what a
 * bf16 net's products take P and dS as (ref_seq.c's as_low).  Integer
 * operations, so AVX-512F alone runs it; P and dS are finite. */
INLINE __m512 bf16_value(__m512 x)
{
    const __m512i i = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(i, 16), _mm512_set1_epi32(1));
    const __m512i up = _mm512_add_epi32(i, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(up, _mm512_set1_epi32((int)0xffff0000u)));
}

/* A row's nvec vectors as bf16 values, in place. */
AVX512 static void round_row(float *row, long nvec)
{
    for (long v = 0; v < nvec; v++)
        _mm512_storeu_ps(row + v * LANES, bf16_value(_mm512_loadu_ps(row + v * LANES)));
}

/* out's rows (tp apart), vectors v0 .. v0 + nv - 1, = alpha a_r . kt's
 * columns, over the hs dimensions in order. */
INLINE void score_tile(float *out, long tp, const float *const a[ROWS], const float *kt, long hs, long v0, const int nv,
                       float alpha)
{
    __m512 acc[ROWS][CHUNK];
    for (int r = 0; r < ROWS; r++)
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (long d = 0; d < hs; d++) {
        __m512 b[CHUNK];
        for (int v = 0; v < nv; v++)
            b[v] = _mm512_loadu_ps(kt + d * tp + (v0 + v) * LANES);
        for (int r = 0; r < ROWS; r++) {
            const __m512 x = _mm512_set1_ps(a[r][d]);
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int v = 0; v < nv; v++)
            _mm512_storeu_ps(out + r * tp + (v0 + v) * LANES, _mm512_mul_ps(_mm512_set1_ps(alpha), acc[r][v]));
}

/* A block's scores over its first nvec vectors of keys. */
AVX512 static void block_scores(float *out, long tp, const float *const a[ROWS], const float *kt, long hs, long nvec,
                                float alpha)
{
    for (long v0 = 0; v0 < nvec; v0 += CHUNK)
        switch (min_of(CHUNK, nvec - v0)) {
        case 4: score_tile(out, tp, a, kt, hs, v0, 4, alpha); break;
        case 3: score_tile(out, tp, a, kt, hs, v0, 3, alpha); break;
        case 2: score_tile(out, tp, a, kt, hs, v0, 2, alpha); break;
        default: score_tile(out, tp, a, kt, hs, v0, 1, alpha); break;
        }
}

/* Query i's row of P in place of its scores (nvec vectors; zeros right of
 * the diagonal), its max and sum's reciprocal returned. */
AVX512 static void softmax_row(float *row, long i, long nvec, float *max, float *inv)
{
    __m512 m = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
    for (long v = 0; v < nvec; v++)
        m = _mm512_mask_max_ps(m, counted(v, i), m, _mm512_loadu_ps(row + v * LANES));
    const float mx = _mm512_reduce_max_ps(m);
    for (long v = 0; v < nvec; v++) {
        const __m512 e = weight_unscaled(row, v, i, mx);
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(row + v * LANES, e);
    }
    const float r = 1.0f / _mm512_reduce_add_ps(sum);
    for (long v = 0; v < nvec; v++)
        _mm512_storeu_ps(row + v * LANES, _mm512_mul_ps(_mm512_loadu_ps(row + v * LANES), _mm512_set1_ps(r)));
    *max = mx, *inv = r;
}

/* P's row again from the forward pass's statistics: the same exponential
 * and product on the same scores, so its bits. */
AVX512 static void weights_again(float *row, long i, long nvec, float mx, float inv)
{
    for (long v = 0; v < nvec; v++) {
        _mm512_storeu_ps(row + v * LANES, _mm512_mul_ps(weight_unscaled(row, v, i, mx), _mm512_set1_ps(inv)));
    }
}

/* dS's row in place of dP's: P (dP - rowsum(P dP)) scale. */
AVX512 static void softmax_bwd_row(float *ds, const float *p, long nvec, float scale)
{
    __m512 inner = _mm512_setzero_ps();
    for (long v = 0; v < nvec; v++)
        inner = _mm512_fmadd_ps(_mm512_loadu_ps(p + v * LANES), _mm512_loadu_ps(ds + v * LANES), inner);
    const __m512 sum = _mm512_set1_ps(_mm512_reduce_add_ps(inner)), s = _mm512_set1_ps(scale);
    for (long v = 0; v < nvec; v++) {
        const __m512 pv = _mm512_loadu_ps(p + v * LANES), d = _mm512_sub_ps(_mm512_loadu_ps(ds + v * LANES), sum);
        _mm512_storeu_ps(ds + v * LANES, _mm512_mul_ps(_mm512_mul_ps(pv, d), s));
    }
}

/* out[r] (NULL: not stored) = sum over k < kend of m[r][k] x_k: the
 * block's rows of m (tp apart) times x's rows (ld apart), hv vectors wide. */
INLINE void mix_tile(float *const out[ROWS], const float *m, long tp, const float *x, long ld, long kend, const int hv)
{
    __m512 acc[ROWS][4];
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < hv; h++)
            acc[r][h] = _mm512_setzero_ps();
    for (long k = 0; k < kend; k++) {
        __m512 b[4];
        for (int h = 0; h < hv; h++)
            b[h] = _mm512_loadu_ps(x + k * ld + h * LANES);
        for (int r = 0; r < ROWS; r++) {
            const __m512 w = _mm512_set1_ps(m[r * tp + k]);
            for (int h = 0; h < hv; h++)
                acc[r][h] = _mm512_fmadd_ps(w, b[h], acc[r][h]);
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; out[r] && h < hv; h++)
            _mm512_storeu_ps(out[r] + h * LANES, acc[r][h]);
}

AVX512 static void mix(float *const out[ROWS], const float *m, long tp, const float *x, long ld, long kend, long hs)
{
    switch (hs / LANES) {
    case 4: mix_tile(out, m, tp, x, ld, kend, 4); break;
    case 3: mix_tile(out, m, tp, x, ld, kend, 3); break;
    case 2: mix_tile(out, m, tp, x, ld, kend, 2); break;
    default: mix_tile(out, m, tp, x, ld, kend, 1); break;
    }
}

/* out[r] (NULL: not stored) = sum over queries i from i0 to t - 1 of
 * m[i][col[r]] x_i: ROWS keys' gradient rows, the queries in order. */
INLINE void mix_t_tile(float *const out[ROWS], const float *m, long tp, const long col[ROWS], const float *x, long ld,
                       long i0, long t, const int hv)
{
    __m512 acc[ROWS][4];
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < hv; h++)
            acc[r][h] = _mm512_setzero_ps();
    for (long i = i0; i < t; i++) {
        __m512 b[4];
        for (int h = 0; h < hv; h++)
            b[h] = _mm512_loadu_ps(x + i * ld + h * LANES);
        for (int r = 0; r < ROWS; r++) {
            const __m512 w = _mm512_set1_ps(m[i * tp + col[r]]);
            for (int h = 0; h < hv; h++)
                acc[r][h] = _mm512_fmadd_ps(w, b[h], acc[r][h]);
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; out[r] && h < hv; h++)
            _mm512_storeu_ps(out[r] + h * LANES, acc[r][h]);
}

AVX512 static void mix_t(float *const out[ROWS], const float *m, long tp, const long col[ROWS], const float *x, long ld,
                         long i0, long t, long hs)
{
    switch (hs / LANES) {
    case 4: mix_t_tile(out, m, tp, col, x, ld, i0, t, 4); break;
    case 3: mix_t_tile(out, m, tp, col, x, ld, i0, t, 3); break;
    case 2: mix_t_tile(out, m, tp, col, x, ld, i0, t, 2); break;
    default: mix_t_tile(out, m, tp, col, x, ld, i0, t, 1); break;
    }
}

/* A block's rows of a (ld apart; past t the last again) and of out (ldo
 * apart; NULL past t), where out is given. */
static void block_rows(const float *a[ROWS], float *out[ROWS], const float *src, long ld, float *dst, long ldo, long i0,
                       long t)
{
    for (int r = 0; r < ROWS; r++) {
        a[r] = src + min_of(i0 + r, t - 1) * ld;
        if (out)
            out[r] = i0 + r < t ? dst + (i0 + r) * ldo : NULL;
    }
}

AVX512 void causal_small_forward(float *y, long ldy, const float *q, const float *k, const float *v, long ld, long t,
                                 long hs, float *stats, void *scratch, enum causal_small_operands operands)
{
    struct bufs b;
    carve(t, hs, scratch, &b);
    const long tp = padded(t);
    const float alpha = 1.0f / sqrtf((float)hs);
    transpose_padded(b.kt, tp, k, ld, t, hs);
    for (long i0 = 0; i0 < t; i0 += ROWS) {
        const float *a[ROWS];
        float *out[ROWS];
        const long last = min_of(i0 + ROWS, t) - 1, nvec = last / LANES + 1;
        block_rows(a, out, q, ld, y, ldy, i0, t);
        block_scores(b.p, tp, a, b.kt, hs, nvec, alpha);
        for (int r = 0; r < ROWS; r++) {
            float mx, inv;
            softmax_row(b.p + r * tp, min_of(i0 + r, t - 1), nvec, &mx, &inv);
            if (out[r])
                stats[i0 + r] = mx, stats[t + i0 + r] = inv;
            if (operands == CAUSAL_SMALL_BF16)
                round_row(b.p + r * tp, nvec);
        }
        mix(out, b.p, tp, v, ld, last + 1, hs);
    }
}

/* P, dS and dQ of one block of queries. */
AVX512 static void backward_block(const struct bufs *b, float *dq, long lddq, const float *dy, long lddy,
                                  const float *q, const float *k, long ld, long t, long hs, const float *stats, long i0,
                                  enum causal_small_operands operands)
{
    const long tp = padded(t), last = min_of(i0 + ROWS, t) - 1, nvec = last / LANES + 1;
    const float alpha = 1.0f / sqrtf((float)hs);
    const float *a[ROWS], *g[ROWS];
    float *out[ROWS], *p = b->p + i0 * tp, *ds = b->ds + i0 * tp;
    block_rows(g, NULL, dy, lddy, NULL, 0, i0, t);
    block_rows(a, out, q, ld, dq, lddq, i0, t);
    block_scores(p, tp, a, b->kt, hs, nvec, alpha);
    block_scores(ds, tp, g, b->vt, hs, nvec, 1.0f);  /* dP = dY V^T */
    for (int r = 0; r < ROWS; r++) {
        const long i = min_of(i0 + r, t - 1);
        weights_again(p + r * tp, i, nvec, stats[i], stats[t + i]);
        softmax_bwd_row(ds + r * tp, p + r * tp, nvec, alpha);
        if (operands == CAUSAL_SMALL_BF16)  /* after dS, which takes P unrounded as the reference does */
            round_row(p + r * tp, nvec), round_row(ds + r * tp, nvec);
    }
    mix(out, ds, tp, k, ld, last + 1, hs);  /* dQ = dS K */
}

AVX512 void causal_small_backward(float *dq, float *dk, float *dv, long lddq, const float *dy, long lddy,
                                  const float *q, const float *k, const float *v, long ld, long t, long hs,
                                  const float *stats, void *scratch, enum causal_small_operands operands)
{
    struct bufs b;
    carve(t, hs, scratch, &b);
    const long tp = padded(t);
    transpose_padded(b.kt, tp, k, ld, t, hs);
    transpose_padded(b.vt, tp, v, ld, t, hs);
    for (long i0 = 0; i0 < t; i0 += ROWS)
        backward_block(&b, dq, lddq, dy, lddy, q, k, ld, t, hs, stats, i0, operands);
    for (long j0 = 0; j0 < t; j0 += ROWS) {
        long col[ROWS];
        float *outk[ROWS], *outv[ROWS];
        for (int r = 0; r < ROWS; r++) {
            col[r] = min_of(j0 + r, t - 1);
            outk[r] = j0 + r < t ? dk + (j0 + r) * lddq : NULL;
            outv[r] = j0 + r < t ? dv + (j0 + r) * lddq : NULL;
        }
        mix_t(outk, b.ds, tp, col, q, ld, j0, t, hs);   /* dK = dS^T Q */
        mix_t(outv, b.p, tp, col, dy, lddy, j0, t, hs); /* dV = P^T dY */
    }
}

#else /* no AVX-512 on this architecture: the layer takes another kernel */

bool causal_small_fits(long t, long hs) { return (void)t, (void)hs, false; }

void causal_small_forward(float *y, long ldy, const float *q, const float *k, const float *v, long ld, long t, long hs,
                          float *stats, void *scratch, enum causal_small_operands operands)
{
    (void)y, (void)ldy, (void)q, (void)k, (void)v, (void)ld, (void)t, (void)hs, (void)stats, (void)scratch,
        (void)operands;
}

void causal_small_backward(float *dq, float *dk, float *dv, long lddq, const float *dy, long lddy, const float *q,
                           const float *k, const float *v, long ld, long t, long hs, const float *stats,
                           void *scratch, enum causal_small_operands operands)
{
    (void)dq, (void)dk, (void)dv, (void)lddq, (void)dy, (void)lddy, (void)q, (void)k, (void)v, (void)ld, (void)t,
        (void)hs, (void)stats, (void)scratch, (void)operands;
}

#endif
