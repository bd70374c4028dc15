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
 *                        rows: rows 2kp and 2kp + 1 interleaved (V, K; P, dS
 *                        in column tiles);
 *   transposed words     B of the scores (K, V: k along their rows; in column
 *                        tiles) and A of the transposed products (Q, dY),
 *                        both small (t x hs).
 * The products with P or dS transposed (dK = dS^T Q, dV = P^T dY) are
 * computed transposed (dK^T = Q^T dS) so no t x t matrix is transposed: a
 * column tile of dS starting at j needs k (= i) from j only.
 *
 * P and dS are made a stripe of STRIPE_ROWS rows at a time (scores, fp32
 * softmax, packing, and the products whose rows they are), so no t x t
 * fp32 matrix is written (8 MB of P and dS a thread at T 1024, four times
 * a Sapphire Rapids core's L2).  The backward pass keeps P and dS only as
 * bf16 pairs for the two transposed products, which sum over every row,
 * and runs those a column tile at a time.  The B operands a product reads
 * a tile at a time over many k (the scores' K or V transposed, the pairs
 * of P and dS) lie in column tiles, a tile's k rows one after another: at
 * a whole row's stride (4 KB at T 1024) a tile read one line per page.
 * Each element's sum runs in the same order as the whole-head version's,
 * so the same bits (docs/benchmarks.md, 0k, measures both).  Packing pads
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
/* A multiple of TILE_ROWS and of TILE_COLS, so a stripe's blocks are the
 * whole head's and its last diagonal tile ends on the stripe's edge; 32 rows
 * of P and of dS at T 1024 are 256 KB, in L2 with the packed operands. */
#define STRIPE_ROWS 32

static long round_up(long x, long m) { return (x + m - 1) / m * m; }
static long min_of(long a, long b) { return a < b ? a : b; }

/* The first n of 16 lanes (none for n <= 0). */
static __mmask16 lanes(long n) { return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

/* The head's buffers, carved from the scratch (words of two bf16, then floats). */
struct head_bufs {
    long t, hs, t32, half_t, hw, h32;  /* t32, h32: t, hs to whole tiles; half_t: pairs of t; hw: words of hs */
    uint32_t *rows_q, *rows_dy;        /* t x hw: Q; dY (backward) */
    uint32_t *rows_tmp;                /* t x hw: K or V before their transpose */
    uint32_t *kt, *vt;                 /* hw x t32: K, V (backward) transposed in column tiles, the scores' B */
    uint32_t *mix_b;                   /* half_t x h32: V (forward) or K (backward) as pairs */
    uint32_t *mix_a;                   /* STRIPE_ROWS x t32 / 2: a stripe of P or dS as rows */
    uint32_t *pairs_ds, *pairs_p;      /* half_t x t32: dS and P as pairs in column tiles (backward) */
    uint32_t *sq_pairs, *sq_a;         /* half_t x h32 -> hs x half_t: Q or dY as pairs, transposed */
    float *sp, *sds;                   /* STRIPE_ROWS x t32: a stripe of P; of dP, then dS */
    float *ct;                         /* hs x t: dK^T or dV^T */
};

static struct head_bufs carve(void *scratch, long t, long hs)
{
    struct head_bufs h = {.t = t, .hs = hs, .t32 = round_up(t, TILE_COLS), .half_t = (t + 1) / 2,
                          .hw = round_up(hs, 32) / 2, .h32 = round_up(hs, TILE_COLS)};
    uint32_t *w = scratch;
    h.rows_q = w, w += t * h.hw;
    h.rows_dy = w, w += t * h.hw;
    h.rows_tmp = w, w += t * h.hw;
    h.kt = w, w += h.hw * h.t32;
    h.vt = w, w += h.hw * h.t32;
    h.mix_b = w, w += h.half_t * h.h32;
    h.mix_a = w, w += STRIPE_ROWS * h.t32 / 2;
    h.pairs_ds = w, w += h.half_t * h.t32;
    h.pairs_p = w, w += h.half_t * h.t32;
    h.sq_pairs = w, w += h.half_t * h.h32;
    h.sq_a = w, w += hs * h.half_t;
    h.sp = (float *)w, w += STRIPE_ROWS * h.t32;
    h.sds = (float *)w, w += STRIPE_ROWS * h.t32;
    h.ct = (float *)w;
    return h;
}

size_t causal_bf16_scratch_bytes(long t, long hs)
{
    const long t32 = round_up(t, TILE_COLS), half_t = (t + 1) / 2, hw = round_up(hs, 32) / 2,
               h32 = round_up(hs, TILE_COLS);
    const long words = 3 * t * hw + 2 * hw * t32 + half_t * h32 + STRIPE_ROWS * t32 / 2 + 2 * half_t * t32 +
                       half_t * h32 + hs * half_t + 2 * STRIPE_ROWS * t32 + hs * t;  /* carve's, in its order */
    return (size_t)words * 4;
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

/* Where pack_pairs writes: pair row kp's columns n..n + 31 at
 * w + kp * ldw + n / 32 * panel, as far as width columns (a multiple of 32).
 * Row-major: ldw = width, panel = 32.  Column tiles (panels): ldw = 32,
 * panel = 32 x the pair rows, so the rows one tile of a product reads lie
 * one after another (a stride of the whole row, 4 KB at T 1024, left the
 * hardware's prefetch a page per line). */
struct pair_dst {
    uint32_t *w;
    long ldw, panel, width;
};

static struct pair_dst row_major(uint32_t *w, long width) { return (struct pair_dst){w, width, TILE_COLS, width}; }

/* dst's row kp = src's rows 2kp and 2kp + 1 interleaved column by column,
 * for kp < pairs; rows at or past krows and columns past ncols zero.
 * lower: src is rows first.. (even) of a lower triangular matrix read by
 * transposed_product, whose column tile at n reads pair rows from n / 2
 * on: a pair row is packed only as far as the last tile that reads it. */
TARGET static void pack_pairs(struct pair_dst d, const float *src, long lds, long krows, long ncols, long pairs,
                              bool lower, long first)
{
    static const uint16_t order[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i interleave = _mm512_loadu_si512(order);
    for (long kp = 0; kp < pairs; kp++) {
        const float *even = src + 2 * kp * lds, *odd = even + lds;
        const long has_even = 2 * kp < krows, has_odd = 2 * kp + 1 < krows;
        const long last_tile = (first + 2 * kp) / TILE_COLS * TILE_COLS + TILE_COLS;
        const long reach = lower && last_tile < d.width ? last_tile : d.width;
        for (long n = 0; n < reach; n += 16) {
            const __m512 lo = _mm512_maskz_loadu_ps(has_even ? lanes(ncols - n) : 0, even + n);
            const __m512 hi = _mm512_maskz_loadu_ps(has_odd ? lanes(ncols - n) : 0, odd + n);
            const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(d.w + kp * d.ldw + n / TILE_COLS * d.panel + n % TILE_COLS,
                                _mm512_permutexvar_epi16(interleave, both));
        }
    }
}

/* A stripe of a lower-triangular matrix (rows first.. of P or dS: zeros
 * right of the diagonal; ld floats apart) as rows, each only as far as the
 * products read it: a block of TILE_ROWS as far as its last row reaches. */
TARGET static void pack_stripe_rows(uint32_t *dst, long ldw, const float *src, long ld, long t, long first, long rows)
{
    for (long i = 0; i < rows; i += TILE_ROWS) {
        const long r = min_of(rows - i, TILE_ROWS), reach = min_of(round_up(first + i + r, 32), 2 * ldw);
        pack_rows_to(dst + i * ldw, ldw, reach, src + i * ld, ld, r, t);
    }
}

/* dst[c][r] = src[r][c] for rows x cols words, in blocks that stay in L1;
 * dst's columns r in tiles of 32, panel words apart (32: row-major). */
static void transpose_words(uint32_t *dst, long ldd, long panel, const uint32_t *src, long lds, long rows, long cols)
{
    for (long r0 = 0; r0 < rows; r0 += 16)
        for (long c0 = 0; c0 < cols; c0 += 16)
            for (long r = r0; r < r0 + 16 && r < rows; r++)
                for (long c = c0; c < c0 + 16 && c < cols; c++)
                    dst[r / TILE_COLS * panel + c * ldd + r % TILE_COLS] = src[r * lds + c];
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
 * [kp0, kp1); B's column tiles panel words apart (TILE_COLS: row-major). */
struct product {
    const uint32_t *a, *b;
    long lda, ldb, panel, kp0, kp1;
    float alpha;
};

TARGET static void row_block(float *c, long ldc, const struct product *p, long rows, long cols)
{
    for (long n = 0; n < cols; n += TILE_COLS) {
        const __mmask16 m0 = lanes(cols - n), m1 = lanes(cols - n - 16);
        const uint32_t *b = p->b + n / TILE_COLS * p->panel;
        switch (rows) {
        case 8: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 8, p->kp0, p->kp1, p->alpha, m0, m1); break;
        case 7: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 7, p->kp0, p->kp1, p->alpha, m0, m1); break;
        case 6: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 6, p->kp0, p->kp1, p->alpha, m0, m1); break;
        case 5: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 5, p->kp0, p->kp1, p->alpha, m0, m1); break;
        case 4: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 4, p->kp0, p->kp1, p->alpha, m0, m1); break;
        case 3: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 3, p->kp0, p->kp1, p->alpha, m0, m1); break;
        case 2: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 2, p->kp0, p->kp1, p->alpha, m0, m1); break;
        default: tile(c + n, ldc, p->a, p->lda, b, p->ldb, 1, p->kp0, p->kp1, p->alpha, m0, m1); break;
        }
    }
}

/* s (a stripe: rows first.., ld h->t32) = alpha * A B^T over the head's
 * dimensions (A: rows, B: bt transposed), each block of rows as far as its
 * last diagonal tile (the rest is the softmax's to overwrite). */
TARGET static void stripe_scores(float *s, const struct head_bufs *h, const uint32_t *a, const uint32_t *bt,
                                 long first, long rows, float alpha)
{
    for (long i = 0; i < rows; i += TILE_ROWS) {
        const long r = min_of(rows - i, TILE_ROWS), reach = min_of(round_up(first + i + r, TILE_COLS), h->t);
        const struct product p = {a + (first + i) * h->hw, bt, h->hw, TILE_COLS, h->hw * TILE_COLS, 0, (h->hs + 1) / 2,
                                  alpha};
        row_block(s + i * h->t32, h->t32, &p, r, reach);
    }
}

/* y's rows first.. (hs columns, ldy apart) = M X for the stripe of
 * lower-triangular M in h->mix_a and X (h->mix_b): row i sums over k <= i. */
TARGET static void stripe_mix(float *y, long ldy, const struct head_bufs *h, long first, long rows)
{
    for (long i = 0; i < rows; i += TILE_ROWS) {
        const long r = min_of(rows - i, TILE_ROWS);
        const struct product p = {h->mix_a + i * (h->t32 / 2), h->mix_b, h->t32 / 2, h->h32, TILE_COLS, 0,
                                  (first + i + r + 1) / 2, 1.0f};
        row_block(y + (first + i) * ldy, ldy, &p, r, h->hs);
    }
}

/* -------------------------------------------------------------- a head -- */

/* The scores' B: src's rows (K or V) as words, transposed into dst in
 * column tiles of hw x 32 words.  Its columns past t are never written: a
 * score's column reads its own B column only, and those past t are not
 * stored. */
TARGET static void pack_scores_b(uint32_t *dst, const struct head_bufs *h, const float *src, long ld)
{
    pack_rows(h->rows_tmp, h->hw, src, ld, h->t, h->hs);
    transpose_words(dst, TILE_COLS, h->hw * TILE_COLS, h->rows_tmp, h->hw, h->t, h->hw);
}

/* A stripe of P into h->sp: scores, then the fp32 softmax; a copy into
 * keep's rows (t floats, zeros right of the diagonal) where asked. */
TARGET static void stripe_weights(const struct head_bufs *h, long first, long rows, float *keep)
{
    const long width = min_of(first + STRIPE_ROWS, h->t);
    stripe_scores(h->sp, h, h->rows_q, h->kt, first, rows, 1.0f / sqrtf((float)h->hs));
    seq_causal_softmax_rows(h->sp, h->t32, first, rows, width);
    for (long r = 0; keep && r < rows; r++) {
        memcpy(keep + (first + r) * h->t, h->sp + r * h->t32, (size_t)width * sizeof(float));
        memset(keep + (first + r) * h->t + width, 0, (size_t)(h->t - width) * sizeof(float));
    }
}

TARGET void causal_bf16_forward(float *y, long ldy, float *p, const float *q, long ld, long t, long hs, void *scratch)
{
    const struct head_bufs h = carve(scratch, t, hs);
    pack_rows(h.rows_q, h.hw, q, ld, t, hs);
    pack_scores_b(h.kt, &h, q + ld / 3, ld);
    pack_pairs(row_major(h.mix_b, h.h32), q + 2 * (ld / 3), ld, t, hs, h.half_t, false, 0);
    for (long first = 0; first < t; first += STRIPE_ROWS) {
        const long rows = min_of(t - first, STRIPE_ROWS);
        stripe_weights(&h, first, rows, p);
        pack_stripe_rows(h.mix_a, h.t32 / 2, h.sp, h.t32, t, first, rows);
        stripe_mix(y, ldy, &h, first, rows);  /* Y = P V */
    }
}

/* out = M^T X: M (t x t) as pairs in column tiles, X's rows (t x hs) as
 * pairs transposed, computed as X^T M into h->ct a column tile at a time,
 * so that tile of M's pairs stays in cache for every block of X^T's rows,
 * then transposed. */
TARGET static void transposed_product(float *out, long ld, const struct head_bufs *h, const uint32_t *m,
                                      const float *x, long ldx)
{
    pack_pairs(row_major(h->sq_pairs, h->h32), x, ldx, h->t, h->hs, h->half_t, false, 0);
    transpose_words(h->sq_a, h->half_t, TILE_COLS, h->sq_pairs, h->h32, h->half_t, h->hs);
    for (long n = 0; n < h->t; n += TILE_COLS)
        for (long d = 0; d < h->hs; d += TILE_ROWS) {
            /* column j = n.. has no term from rows i < j: its pairs start at n / 2 */
            const struct product p = {h->sq_a + d * h->half_t, m + n / TILE_COLS * h->half_t * TILE_COLS, h->half_t,
                                      TILE_COLS, TILE_COLS, n / 2, h->half_t, 1.0f};
            row_block(h->ct + d * h->t + n, h->t, &p, min_of(h->hs - d, TILE_ROWS), min_of(h->t - n, TILE_COLS));
        }
    nn_transpose(out, ld, h->ct, h->t, h->hs, h->t, NULL);
}

/* One stripe of the backward pass: P again, dP = dY V^T, dS, dQ = dS K, and
 * dS and P kept as pairs for the transposed products. */
TARGET static void backward_stripe(float *dq, long ld, const struct head_bufs *h, long first, long rows, float *keep)
{
    stripe_weights(h, first, rows, keep);
    stripe_scores(h->sds, h, h->rows_dy, h->vt, first, rows, 1.0f);
    seq_causal_softmax_bwd_rows(h->sds, h->sp, h->t32, first, rows, min_of(first + STRIPE_ROWS, h->t),
                                1.0f / sqrtf((float)h->hs));
    pack_stripe_rows(h->mix_a, h->t32 / 2, h->sds, h->t32, h->t, first, rows);
    stripe_mix(dq, ld, h, first, rows);
    const long at = first / 2 * TILE_COLS, pairs = (rows + 1) / 2, panel = h->half_t * TILE_COLS;
    pack_pairs((struct pair_dst){h->pairs_ds + at, TILE_COLS, panel, h->t32}, h->sds, h->t32, rows, h->t, pairs, true,
               first);
    pack_pairs((struct pair_dst){h->pairs_p + at, TILE_COLS, panel, h->t32}, h->sp, h->t32, rows, h->t, pairs, true,
               first);
}

TARGET void causal_bf16_backward(float *dq, float *p, const float *dy, long ldy, const float *q, long ld, long t,
                                 long hs, void *scratch)
{
    const struct head_bufs h = carve(scratch, t, hs);
    const long c = ld / 3;
    pack_rows(h.rows_q, h.hw, q, ld, t, hs);
    pack_rows(h.rows_dy, h.hw, dy, ldy, t, hs);
    pack_scores_b(h.kt, &h, q + c, ld);
    pack_scores_b(h.vt, &h, q + 2 * c, ld);
    pack_pairs(row_major(h.mix_b, h.h32), q + c, ld, t, hs, h.half_t, false, 0);
    for (long first = 0; first < t; first += STRIPE_ROWS)
        backward_stripe(dq, ld, &h, first, min_of(t - first, STRIPE_ROWS), p);
    transposed_product(dq + c, ld, &h, h.pairs_ds, q, ld);    /* dK = dS^T Q */
    transposed_product(dq + 2 * c, ld, &h, h.pairs_p, dy, ldy); /* dV = P^T dY */
}

bool causal_bf16_available(void) { return __builtin_cpu_supports("avx512bf16"); }

#else /* no AVX512-BF16 intrinsics in this compiler: attention stays fp32 */

bool causal_bf16_available(void) { return false; }
size_t causal_bf16_scratch_bytes(long t, long hs) { return (void)t, (void)hs, 0; }
void causal_bf16_forward(float *y, long ldy, float *p, const float *q, long ld, long t, long hs, void *scratch)
{
    (void)y, (void)ldy, (void)p, (void)q, (void)ld, (void)t, (void)hs, (void)scratch;
}
void causal_bf16_backward(float *dq, float *p, const float *dy, long ldy, const float *q, long ld, long t, long hs,
                          void *scratch)
{
    (void)dq, (void)p, (void)dy, (void)ldy, (void)q, (void)ld, (void)t, (void)hs, (void)scratch;
}
#endif
