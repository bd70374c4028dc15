/* Causal attention of one head in bf16 (causal_bf16.h).
 *
 * Every product is C = alpha * A B with A's rows and B's columns in words of
 * two bf16 (the low half the even k, the high the odd): a tile of 8 rows x
 * 32 columns keeps sixteen 16-float accumulators, and each k pair costs two
 * loads of B, a broadcast of A's word per row and two vdpbf16ps per row (64
 * multiply-adds).  Operands are packed once per head:
 *   rows   (pack_rows)   A from a row-major matrix whose k runs along a row
 *                        (Q, dY for the scores; P, dS for the mixes);
 *   pairs  (pack_pairs)  B from a row-major matrix whose k runs down the
 *                        rows: rows 2kp and 2kp + 1 interleaved (V, K; P, dS);
 *   transposed words     B of the scores (K, V: k along their rows) and A of
 *                        the transposed products (Q, dY), both small (t x hs).
 * The products with P or dS transposed (dK = dS^T Q, dV = P^T dY) are
 * computed transposed (dK^T = Q^T dS) so no t x t matrix is transposed: a
 * column tile of dS starting at j needs k (= i) from j only.  Packing pads
 * with zeros (rows and columns to whole pairs and tiles), so tiles read no
 * more than their buffers and a padded pair adds nothing.  The conversions
 * round to nearest even (vcvtne2ps2bf16) and take denormals as zero. */
#include "causal_bf16.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "seq_kernels.h"
#include "transpose.h"

#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 11)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define TILE_ROWS 8   /* 16 accumulators of 32: dot products in flight to hide their latency */
#define TILE_COLS 32  /* two vectors of 16 floats */

static long round_up(long x, long m) { return (x + m - 1) / m * m; }

/* The first n of 16 lanes (none for n <= 0). */
static __mmask16 lanes(long n) { return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

/* The head's buffers, carved from the scratch (words of two bf16, then floats). */
struct head_bufs {
    long t, hs, t32, half_t, hw, h32;  /* t32, h32: t, hs to whole tiles; half_t: pairs of t; hw: words of hs */
    uint32_t *rows_a, *rows_b;         /* t x hw: Q or dY; K or V before their transpose */
    uint32_t *scores_b;                /* hw x t32: K or V transposed, the scores' B */
    uint32_t *mix_a;                   /* t x t32 / 2: P or dS as rows */
    uint32_t *mix_b;                   /* half_t x h32: V or K as pairs */
    uint32_t *sq_b;                    /* half_t x t32: P or dS as pairs */
    uint32_t *sq_pairs, *sq_a;         /* half_t x h32 -> hs x half_t: Q or dY as pairs, transposed */
    float *ct;                         /* hs x t: dK^T or dV^T */
};

static struct head_bufs carve(void *scratch, long t, long hs)
{
    struct head_bufs h = {.t = t, .hs = hs, .t32 = round_up(t, TILE_COLS), .half_t = (t + 1) / 2,
                          .hw = round_up(hs, 32) / 2, .h32 = round_up(hs, TILE_COLS)};
    uint32_t *w = scratch;
    h.rows_a = w, w += t * h.hw;
    h.rows_b = w, w += t * h.hw;
    h.scores_b = w, w += h.hw * h.t32;
    h.mix_a = w, w += t * h.t32 / 2;
    h.mix_b = w, w += h.half_t * h.h32;
    h.sq_b = w, w += h.half_t * h.t32;
    h.sq_pairs = w, w += h.half_t * h.h32;
    h.sq_a = w, w += hs * h.half_t;
    h.ct = (float *)w;
    return h;
}

size_t causal_bf16_scratch_bytes(long t, long hs)
{
    const long t32 = round_up(t, TILE_COLS), half_t = (t + 1) / 2, hw = round_up(hs, 32) / 2,
               h32 = round_up(hs, TILE_COLS);
    const long words = 2 * t * hw + hw * t32 + t * t32 / 2 + 2 * half_t * h32 + half_t * t32 + hs * half_t;
    return (size_t)(words + hs * t) * 4;
}

/* ------------------------------------------------------------- packing -- */

/* dst's rows (ldw words apart) = src's rows of cols floats rounded to
 * bf16, zeros past cols, as far as `width` floats (a multiple of 32). */
TARGET static void pack_rows_to(uint32_t *dst, long ldw, long width, const float *src, long lds, long rows, long cols)
{
    for (long r = 0; r < rows; r++)
        for (long k = 0; k < width; k += 32) {
            const __m512 lo = _mm512_maskz_loadu_ps(lanes(cols - k), src + r * lds + k);
            const __m512 hi = _mm512_maskz_loadu_ps(lanes(cols - k - 16), src + r * lds + k + 16);
            _mm512_storeu_si512(dst + r * ldw + k / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
}

/* The whole width: ldw * 2 floats (a multiple of 32). */
TARGET static void pack_rows(uint32_t *dst, long ldw, const float *src, long lds, long rows, long cols)
{
    pack_rows_to(dst, ldw, 2 * ldw, src, lds, rows, cols);
}

/* dst's row kp (ldw words, a multiple of 16) = src's rows 2kp and 2kp + 1
 * interleaved column by column, for kp < pairs; rows at or past krows and
 * columns past ncols zero.  lower: src is lower triangular and read by
 * mix_t, whose column tile at n reads pair rows from n / 2 on: a pair row
 * is packed only as far as the last tile that reads it. */
TARGET static void pack_pairs(uint32_t *dst, long ldw, const float *src, long lds, long krows, long ncols, long pairs,
                              bool lower)
{
    static const uint16_t order[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i interleave = _mm512_loadu_si512(order);
    for (long kp = 0; kp < pairs; kp++) {
        const float *even = src + 2 * kp * lds, *odd = even + lds;
        const long has_even = 2 * kp < krows, has_odd = 2 * kp + 1 < krows;
        const long reach = lower && 2 * kp / TILE_COLS * TILE_COLS + TILE_COLS < ldw
                               ? 2 * kp / TILE_COLS * TILE_COLS + TILE_COLS : ldw;
        for (long n = 0; n < reach; n += 16) {
            const __m512 lo = _mm512_maskz_loadu_ps(has_even ? lanes(ncols - n) : 0, even + n);
            const __m512 hi = _mm512_maskz_loadu_ps(has_odd ? lanes(ncols - n) : 0, odd + n);
            const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(dst + kp * ldw + n, _mm512_permutexvar_epi16(interleave, both));
        }
    }
}

/* A lower-triangular t x t matrix (P, dS: zeros right of the diagonal) as
 * pack_rows would pack it, each row only as far as a mix reads it: the
 * rows of a block of TILE_ROWS as far as the block's last row reaches. */
TARGET static void pack_rows_lower(uint32_t *dst, long ldw, const float *src, long t)
{
    for (long i = 0; i < t; i += TILE_ROWS) {
        const long rows = t - i < TILE_ROWS ? t - i : TILE_ROWS;
        const long reach = round_up(i + rows, 32) < 2 * ldw ? round_up(i + rows, 32) : 2 * ldw;
        pack_rows_to(dst + i * ldw, ldw, reach, src + i * t, t, rows, t);
    }
}

/* dst[c][r] = src[r][c] for rows x cols words, in blocks that stay in L1. */
static void transpose_words(uint32_t *dst, long ldd, const uint32_t *src, long lds, long rows, long cols)
{
    for (long r0 = 0; r0 < rows; r0 += 16)
        for (long c0 = 0; c0 < cols; c0 += 16)
            for (long r = r0; r < r0 + 16 && r < rows; r++)
                for (long c = c0; c < c0 + 16 && c < cols; c++)
                    dst[c * ldd + r] = src[r * lds + c];
}

/* ------------------------------------------------------------ products -- */

/* rows is a constant at each call (always_inline), so acc stays in registers. */
TARGET static inline __attribute__((always_inline)) void tile(float *c, long ldc, const uint32_t *a, long lda,
                                                              const uint32_t *b, long ldb, int rows, long kp0,
                                                              long kp1, float alpha, __mmask16 m0, __mmask16 m1)
{
    __m512 acc[TILE_ROWS][2];
    for (int r = 0; r < rows; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (long kp = kp0; kp < kp1; kp++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + kp * ldb);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + kp * ldb + 16);
        for (int r = 0; r < rows; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r * lda + kp]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
        }
    }
    const __m512 scale = _mm512_set1_ps(alpha);
    for (int r = 0; r < rows; r++) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, _mm512_mul_ps(acc[r][0], scale));
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, _mm512_mul_ps(acc[r][1], scale));
    }
}

/* One block of up to TILE_ROWS rows, columns [0, cols) in tiles, k pairs
 * [kp0, kp1); with from_column a tile's pairs start at its first column's
 * (the transposed products: no i < j term there). */
struct product {
    const uint32_t *a, *b;
    long lda, ldb, kp0, kp1;
    float alpha;
    bool from_column;
};

TARGET static void row_block(float *c, long ldc, const struct product *p, long rows, long cols)
{
    for (long n = 0; n < cols; n += TILE_COLS) {
        const __mmask16 m0 = lanes(cols - n), m1 = lanes(cols - n - 16);
        const long kp0 = p->from_column && n / 2 > p->kp0 ? n / 2 : p->kp0;
        const uint32_t *b = p->b + n;
        switch (rows) {
        case 8: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 8, kp0, p->kp1, p->alpha, m0, m1); break;
        case 7: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 7, kp0, p->kp1, p->alpha, m0, m1); break;
        case 6: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 6, kp0, p->kp1, p->alpha, m0, m1); break;
        case 5: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 5, kp0, p->kp1, p->alpha, m0, m1); break;
        case 4: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 4, kp0, p->kp1, p->alpha, m0, m1); break;
        case 3: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 3, kp0, p->kp1, p->alpha, m0, m1); break;
        case 2: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 2, kp0, p->kp1, p->alpha, m0, m1); break;
        default: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 1, kp0, p->kp1, p->alpha, m0, m1); break;
        }
    }
}

/* s (t x t) = alpha * A B^T over the head's dimensions, columns up to each
 * block's last diagonal tile (the rest is the softmax's to overwrite). */
TARGET static void scores(float *s, const struct head_bufs *h, const uint32_t *a, float alpha)
{
    const struct product p = {a, h->scores_b, h->hw, h->t32, 0, (h->hs + 1) / 2, alpha, false};
    for (long i = 0; i < h->t; i += TILE_ROWS) {
        const long rows = h->t - i < TILE_ROWS ? h->t - i : TILE_ROWS, reach = round_up(i + rows, TILE_COLS);
        struct product pi = p;
        pi.a = a + i * h->hw;
        row_block(s + i * h->t, h->t, &pi, rows, reach < h->t ? reach : h->t);
    }
}

/* y (t x hs, ldy) = M X for lower-triangular M (h->mix_a) and X (h->mix_b):
 * row i sums over k <= i only. */
TARGET static void mix(float *y, long ldy, const struct head_bufs *h)
{
    for (long i = 0; i < h->t; i += TILE_ROWS) {
        const long rows = h->t - i < TILE_ROWS ? h->t - i : TILE_ROWS;
        const struct product p = {h->mix_a + i * (h->t32 / 2), h->mix_b, h->t32 / 2, h->h32, 0, (i + rows + 1) / 2,
                                  1.0f, false};
        row_block(y + i * ldy, ldy, &p, rows, h->hs);
    }
}

/* out (t x hs, ld) = M^T X for lower-triangular M (h->sq_b, pairs) and X
 * (h->sq_a, transposed): computed as X^T M into h->ct, then transposed. */
TARGET static void mix_t(float *out, long ld, const struct head_bufs *h)
{
    for (long d = 0; d < h->hs; d += TILE_ROWS) {
        const long rows = h->hs - d < TILE_ROWS ? h->hs - d : TILE_ROWS;
        const struct product p = {h->sq_a + d * h->half_t, h->sq_b, h->half_t, h->t32, 0, h->half_t, 1.0f, true};
        row_block(h->ct + d * h->t, h->t, &p, rows, h->t);
    }
    nn_transpose(out, ld, h->ct, h->t, h->hs, h->t, NULL);
}

/* -------------------------------------------------------------- a head -- */

/* The scores' B: src's rows (K or V) as words, transposed.  Its columns
 * past t are never written: a score's column reads its own B column only,
 * and those past t are not stored. */
TARGET static void pack_scores_b(const struct head_bufs *h, const float *src, long ld)
{
    pack_rows(h->rows_b, h->hw, src, ld, h->t, h->hs);
    transpose_words(h->scores_b, h->t32, h->rows_b, h->hw, h->t, h->hw);
}

/* P of the head into p: scores, then the fp32 softmax. */
TARGET static void weights(float *p, const struct head_bufs *h, const float *q, long ld)
{
    pack_rows(h->rows_a, h->hw, q, ld, h->t, h->hs);
    pack_scores_b(h, q + ld / 3, ld);
    scores(p, h, h->rows_a, 1.0f / sqrtf((float)h->hs));
    seq_causal_softmax(p, h->t);
}

TARGET void causal_bf16_forward(float *y, long ldy, float *p, const float *q, long ld, long t, long hs, void *scratch)
{
    const struct head_bufs h = carve(scratch, t, hs);
    weights(p, &h, q, ld);
    pack_rows_lower(h.mix_a, h.t32 / 2, p, t);
    pack_pairs(h.mix_b, h.h32, q + 2 * (ld / 3), ld, t, hs, h.half_t, false);
    mix(y, ldy, &h);
}

/* out = M^T X: M (t x t) as pairs, X's rows (t x hs) as pairs transposed. */
TARGET static void transposed_product(float *out, long ld, const struct head_bufs *h, const float *m, const float *x,
                                      long ldx)
{
    pack_pairs(h->sq_b, h->t32, m, h->t, h->t, h->t, h->half_t, true);
    pack_pairs(h->sq_pairs, h->h32, x, ldx, h->t, h->hs, h->half_t, false);
    transpose_words(h->sq_a, h->half_t, h->sq_pairs, h->h32, h->half_t, h->hs);
    mix_t(out, ld, h);
}

TARGET void causal_bf16_backward(float *dq, float *p, float *ds, const float *dy, long ldy, const float *q, long ld,
                                 long t, long hs, void *scratch)
{
    const struct head_bufs h = carve(scratch, t, hs);
    const long c = ld / 3;
    weights(p, &h, q, ld);
    pack_rows(h.rows_a, h.hw, dy, ldy, t, hs);
    pack_scores_b(&h, q + 2 * c, ld);
    scores(ds, &h, h.rows_a, 1.0f);                            /* dP = dY V^T */
    seq_causal_softmax_bwd(ds, p, t, 1.0f / sqrtf((float)hs)); /* dS */
    pack_rows_lower(h.mix_a, h.t32 / 2, ds, t);
    pack_pairs(h.mix_b, h.h32, q + c, ld, t, hs, h.half_t, false);
    mix(dq, ld, &h);                                           /* dQ = dS K */
    transposed_product(dq + c, ld, &h, ds, q, ld);             /* dK = dS^T Q */
    transposed_product(dq + 2 * c, ld, &h, p, dy, ldy);        /* dV = P^T dY */
}

bool causal_bf16_available(void) { return __builtin_cpu_supports("avx512bf16"); }

#else /* no AVX512-BF16 intrinsics in this compiler: attention stays fp32 */

bool causal_bf16_available(void) { return false; }
size_t causal_bf16_scratch_bytes(long t, long hs) { return (void)t, (void)hs, 0; }
void causal_bf16_forward(float *y, long ldy, float *p, const float *q, long ld, long t, long hs, void *scratch)
{
    (void)y, (void)ldy, (void)p, (void)q, (void)ld, (void)t, (void)hs, (void)scratch;
}
void causal_bf16_backward(float *dq, float *p, float *ds, const float *dy, long ldy, const float *q, long ld,
                          long t, long hs, void *scratch)
{
    (void)dq, (void)p, (void)ds, (void)dy, (void)ldy, (void)q, (void)ld, (void)t, (void)hs, (void)scratch;
}
#endif
