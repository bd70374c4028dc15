/* The sequence layers' row and element kernels (seq_kernels.h).
 *
 * Layer norm and GELU are C here because oneDNN 2.6.3's layer norm was a
 * generic C++ kernel (its jit one came in 2.7) and its AVX2 GELU ran at a
 * third of this one's speed (docs/benchmarks-history.md, section 11).
 * Whether oneDNN 3's primitives now do better is measured by
 * bench/st-op-candidates (docs/benchmarks.md, section 0).  The causal softmax has no oneDNN counterpart: its
 * softmax takes no mask.
 *
 * The `omp simd` reductions sum in vector lanes: a fixed order for a given
 * build and CPU, so runs repeat bitwise; within fp32 round-off of the
 * reference's double sums (test_gpt's tolerance). */
#define _GNU_SOURCE
#include "seq_kernels.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "simd.h"

/* ------------------------------------------------------- layer norm -- */

/* One row each way, on restrict pointers so that every loop is a vector
 * loop (through the node's pointers GCC must assume the output may overlap
 * the statistics and re-read them every element). */
ST_MULTIVERSION static void ln_row_fwd(float *restrict y, const float *restrict x, const float *restrict g,
                                       const float *restrict b, long c, float *restrict mean_rstd)
{
    float m = 0, v = 0;
#pragma omp simd reduction(+ : m)
    for (long i = 0; i < c; i++)
        m += x[i];
    m /= (float)c;
#pragma omp simd reduction(+ : v)
    for (long i = 0; i < c; i++)
        v += (x[i] - m) * (x[i] - m);
    const float s = 1.0f / sqrtf(v / (float)c + 1e-5f);
#pragma omp simd
    for (long i = 0; i < c; i++)
        y[i] = (x[i] - m) * s * g[i] + b[i];
    mean_rstd[0] = m;
    mean_rstd[1] = s;
}

/* Adds the row's share of dgamma and dbeta to pg and pb; dx may be NULL. */
ST_MULTIVERSION static void ln_row_bwd(float *restrict dx, float *restrict pg, float *restrict pb,
                                       const float *restrict x, const float *restrict dy, const float *restrict g,
                                       long c, float m, float s)
{
    float md = 0, mdx = 0;
#pragma omp simd reduction(+ : md, mdx)
    for (long i = 0; i < c; i++) {
        const float xhat = (x[i] - m) * s, dg = dy[i] * g[i];
        pg[i] += dy[i] * xhat;
        pb[i] += dy[i];
        md += dg;
        mdx += dg * xhat;
    }
    if (!dx)
        return;
    md /= (float)c;
    mdx /= (float)c;
#pragma omp simd
    for (long i = 0; i < c; i++)
        dx[i] = s * (dy[i] * g[i] - md - (x[i] - m) * s * mdx);
}

void seq_ln_fwd(float *y, float *stats, const float *x, const float *g, const float *b, long rows, long c)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++)
        ln_row_fwd(y + r * c, x + r * c, g, b, c, stats + 2 * r);
}

void seq_ln_fwd_bf16(st_bf16 *y, float *stats, const float *x, const float *g, const float *b, long rows, long c,
                     float *rowbuf)
{
#pragma omp parallel
    {
        float *row = rowbuf + (size_t)omp_get_thread_num() * (size_t)c;
#pragma omp for schedule(static)
        for (long r = 0; r < rows; r++) {
            ln_row_fwd(row, x + r * c, g, b, c, stats + 2 * r);
            st_bf16_from_f32_n(y + r * c, row, (size_t)c);
        }
    }
}

size_t seq_ln_partial_floats(long c)
{
    return (size_t)omp_get_max_threads() * 2 * (size_t)c;
}

/* dg, db: the threads' partials summed in thread order (called by every
 * thread of the backward's parallel region, after its barrier). */
static void sum_partials(float *dg, float *db, const float *partial, int nt, long c)
{
#pragma omp for schedule(static)
    for (long i = 0; i < 2 * c; i++) {
        float s = 0;
        for (int k = 0; k < nt; k++)
            s += partial[(size_t)k * 2 * c + i];
        (i < c ? dg : db - c)[i] = s;
    }
}

void seq_ln_bwd(float *dx, float *dg, float *db, float *partial, const float *x, const float *dy, const float *g,
                const float *stats, long rows, long c)
{
    const int threads = omp_get_max_threads();
#pragma omp parallel num_threads(threads)
    {
        const int me = omp_get_thread_num(), nt = omp_get_num_threads();
        float *pg = partial + (size_t)me * 2 * c, *pb = pg + c;
        memset(pg, 0, 2 * (size_t)c * sizeof(float));
        const long first = rows * me / nt, last = rows * (me + 1) / nt;
        for (long r = first; r < last; r++)
            ln_row_bwd(dx ? dx + r * c : NULL, pg, pb, x + r * c, dy + r * c, g, c, stats[2 * r], stats[2 * r + 1]);
#pragma omp barrier
        sum_partials(dg, db, partial, nt, c);
    }
}

void seq_ln_bwd_bf16(float *dx, float *dg, float *db, float *partial, const float *x, const st_bf16 *dy,
                     const float *g, const float *stats, long rows, long c, float *rowbuf)
{
    const int threads = omp_get_max_threads();
#pragma omp parallel num_threads(threads)
    {
        const int me = omp_get_thread_num(), nt = omp_get_num_threads();
        float *pg = partial + (size_t)me * 2 * c, *pb = pg + c, *row = rowbuf + (size_t)me * (size_t)c;
        memset(pg, 0, 2 * (size_t)c * sizeof(float));
        const long first = rows * me / nt, last = rows * (me + 1) / nt;
        for (long r = first; r < last; r++) {
            st_bf16_to_f32_n(row, dy + r * c, (size_t)c);
            ln_row_bwd(dx ? dx + r * c : NULL, pg, pb, x + r * c, row, g, c, stats[2 * r], stats[2 * r + 1]);
        }
#pragma omp barrier
        sum_partials(dg, db, partial, nt, c);
    }
}

/* ------------------------------------------------------------- GELU -- */

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* The forward keeps tanh(u) for the backward: reading it back costs less
 * than computing it again (the exp and the division are most of GELU). */
ST_MULTIVERSION static void gelu_rows(float *restrict y, float *restrict th, const float *restrict x, long count)
{
#pragma omp simd
    for (long i = 0; i < count; i++) {
        const float v = x[i], t = nn_tanhf(GELU_K * (v + 0.044715f * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
        th[i] = t;
    }
}

ST_MULTIVERSION static void gelu_rows_bwd(float *restrict dx, const float *restrict dy, const float *restrict x,
                                          const float *restrict th, long count)
{
#pragma omp simd
    for (long i = 0; i < count; i++) {
        const float v = x[i], t = th[i];
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3 * 0.044715f * v * v));
    }
}

/* Runs `call` on each cache-sized piece, split over the threads: `at` is
 * the piece's first element, `n` its length (the last piece's is short). */
#define GELU_PIECE 4096L
#define FOR_GELU_PIECES(count, call)                                                                     \
    do {                                                                                                 \
        const long pieces_ = ((count) + GELU_PIECE - 1) / GELU_PIECE;                                    \
        _Pragma("omp parallel for schedule(static)") for (long k_ = 0; k_ < pieces_; k_++)               \
        {                                                                                                \
            const long at = k_ * GELU_PIECE, n = (count) - at < GELU_PIECE ? (count) - at : GELU_PIECE; \
            call;                                                                                        \
        }                                                                                                \
    } while (0)

void seq_gelu_fwd(float *y, float *tanh_u, const float *x, long count)
{
    FOR_GELU_PIECES(count, gelu_rows(y + at, tanh_u + at, x + at, n));
}

void seq_gelu_bwd(float *dx, const float *dy, const float *x, const float *tanh_u, long count)
{
    FOR_GELU_PIECES(count, gelu_rows_bwd(dx + at, dy + at, x + at, tanh_u + at, n));
}

/* bf16 in and out, fused: each element widened (exact) and its result
 * rounded once inside the loop, which GCC vectorises with bf16.h's element
 * conversions inlined (widening into scratch arrays first ran 30% slower
 * than the fp32 kernel). */
ST_MULTIVERSION static void gelu_rows_bf16(st_bf16 *restrict y, float *restrict th, const st_bf16 *restrict x,
                                           long count)
{
#pragma omp simd
    for (long i = 0; i < count; i++) {
        const float v = st_bf16_to_f32(x[i]), t = nn_tanhf(GELU_K * (v + 0.044715f * v * v * v));
        y[i] = st_bf16_from_f32(0.5f * v * (1.0f + t));
        th[i] = t;
    }
}

ST_MULTIVERSION static void gelu_rows_bwd_bf16(st_bf16 *restrict dx, const st_bf16 *restrict dy,
                                               const st_bf16 *restrict x, const float *restrict th, long count)
{
#pragma omp simd
    for (long i = 0; i < count; i++) {
        const float v = st_bf16_to_f32(x[i]), t = th[i];
        dx[i] = st_bf16_from_f32(st_bf16_to_f32(dy[i]) *
                       (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3 * 0.044715f * v * v)));
    }
}

void seq_gelu_fwd_bf16(st_bf16 *y, float *tanh_u, const st_bf16 *x, long count)
{
    FOR_GELU_PIECES(count, gelu_rows_bf16(y + at, tanh_u + at, x + at, n));
}

void seq_gelu_bwd_bf16(st_bf16 *dx, const st_bf16 *dy, const st_bf16 *x, const float *tanh_u, long count)
{
    FOR_GELU_PIECES(count, gelu_rows_bwd_bf16(dx + at, dy + at, x + at, tanh_u + at, n));
}

/* -------------------------------------------------- causal softmax -- */

/* The softmax's row loops are functions of their own so that they get the
 * AVX2 and AVX-512 clones: inside the attention's step they were built for
 * the baseline (SSE2) and took 2-3% of gpt-mini's step.  oneDNN 3's softmax
 * runs a row at up to twice this speed (bench/st-op-candidates softmax), but
 * takes no mask; rows run over whole vectors with the mask as a select
 * measured no faster (docs/benchmarks-history.md, section 11). */

/* Row r of the scores (the matrix's row i = first + r) replaced by the
 * softmax over its columns 0..i, zeros right of the diagonal to width. */
ST_MULTIVERSION void seq_causal_softmax_rows(float *p, long ld, long first, long rows, long width)
{
    for (long r = 0; r < rows; r++) {
        const long i = first + r;
        float *pr = p + r * ld, mx = pr[0], sum = 0;
#pragma omp simd reduction(max : mx)
        for (long k = 1; k <= i; k++)
            mx = pr[k] > mx ? pr[k] : mx;
#pragma omp simd reduction(+ : sum)
        for (long k = 0; k <= i; k++)
            sum += (pr[k] = nn_expf(pr[k] - mx));
#pragma omp simd
        for (long k = 0; k < width; k++)
            pr[k] = k <= i ? pr[k] / sum : 0.0f;
    }
}

void seq_causal_softmax(float *p, long t) { seq_causal_softmax_rows(p, t, 0, t, t); }

/* dS = P (dP - rowsum(P dP)) scale, in place of dP, on the same rows. */
ST_MULTIVERSION void seq_causal_softmax_bwd_rows(float *ds, const float *p, long ld, long first, long rows,
                                                 long width, float scale)
{
    for (long r = 0; r < rows; r++) {
        const long i = first + r;
        const float *pr = p + r * ld;
        float *dr = ds + r * ld, inner = 0;
#pragma omp simd reduction(+ : inner)
        for (long k = 0; k <= i; k++)
            inner += pr[k] * dr[k];
#pragma omp simd
        for (long k = 0; k < width; k++)
            dr[k] = k <= i ? pr[k] * (dr[k] - inner) * scale : 0.0f;
    }
}

void seq_causal_softmax_bwd(float *ds, const float *p, long t, float scale)
{
    seq_causal_softmax_bwd_rows(ds, p, t, 0, t, t, scale);
}

/* ------------------------------------ causal softmax, stripe transposed -- */

/* A stripe's scores held transposed: key k's row over the stripe's queries.
 * Down the keys, with the queries in the vector lanes, each query's max and
 * sum are a lane of their own, so no step waits on a reduction (the row
 * softmax's max waited a vmaxps latency a vector); QUERY_BLOCK queries'
 * statistics stay in L1 while the keys stream past. */
enum { QUERY_BLOCK = 64 };

static long min_of(long a, long b) { return a < b ? a : b; }

/* Queries j < n (lanes), ld floats a key row, keys 0..w-1: keys up to
 * first count for every query, key first + d for queries d on, so each key's
 * row starts at its first counting query and needs no mask (64-bit lane
 * compares were a tenth of the softmax); the rest of its row is zero. */
static int first_counting(long k, long first) { return k <= first ? 0 : (int)(k - first); }

ST_MULTIVERSION static void softmax_cols_block(float *restrict s, st_bf16 *restrict p16, long ld, long w, long first,
                                               int n, bool keep_fp32, float *restrict max, float *restrict recip)
{
    float mx[QUERY_BLOCK], inv[QUERY_BLOCK];  /* the caller's copies are written once, at the end */
#pragma omp simd
    for (int j = 0; j < n; j++)
        mx[j] = s[j], inv[j] = 0;  /* key 0 counts for every query */
    for (long k = 1; k < w; k++) {
        const float *restrict row = s + k * ld;
#pragma omp simd
        for (int j = first_counting(k, first); j < n; j++)
            mx[j] = row[j] > mx[j] ? row[j] : mx[j];
    }
    for (long k = 0; k < w; k++) {
        float *restrict row = s + k * ld;
        const int from = first_counting(k, first);
        memset(row, 0, (size_t)from * sizeof *row);
#pragma omp simd
        for (int j = from; j < n; j++) {
            row[j] = nn_expf(row[j] - mx[j]);
            inv[j] += row[j];
        }
    }
#pragma omp simd
    for (int j = 0; j < n; j++)
        inv[j] = 1.0f / inv[j];
    for (long k = 0; k < w; k++) {
        float *restrict row = s + k * ld;
        if (!p16) {  /* fp32 products: P stays here alone */
#pragma omp simd
            for (int j = 0; j < n; j++)
                row[j] = row[j] * inv[j];
            continue;
        }
        st_bf16 *restrict out = p16 + k * ld;
        if (keep_fp32) {
#pragma omp simd
            for (int j = 0; j < n; j++) {
                row[j] *= inv[j];
                out[j] = st_bf16_from_f32(row[j]);
            }
        } else {
#pragma omp simd
            for (int j = 0; j < n; j++)
                out[j] = st_bf16_from_f32(row[j] * inv[j]);
        }
    }
    memcpy(max, mx, (size_t)n * sizeof *mx);
    memcpy(recip, inv, (size_t)n * sizeof *inv);
}

void seq_causal_softmax_cols(float *s, st_bf16 *p16, long first, long n, bool keep_fp32, float *max, float *inv)
{
    for (long j0 = 0; j0 < n; j0 += QUERY_BLOCK)
        softmax_cols_block(s + j0, p16 ? p16 + j0 : NULL, n, first + n, first + j0, (int)min_of(QUERY_BLOCK, n - j0),
                           keep_fp32, max + j0, inv + j0);
}

/* P again as the forward made it (its exponential, then its reciprocal's
 * product: the same operations on the same scores, so the same bits), in
 * place of the scores and rounded into p16 where given, and rowsum(P dP)
 * beside it: one pass over the stripe where the softmax again took three.
 * Then dS, rounded into ds16, or in place of dP where ds16 is NULL. */
ST_MULTIVERSION static void softmax_again_bwd_cols_block(float *restrict s, st_bf16 *restrict p16,
                                                         st_bf16 *restrict ds16, float *restrict dp,
                                                         const float *restrict mx, const float *restrict inv,
                                                         long ld, long w, long first, int n, float scale)
{
    float inner[QUERY_BLOCK];
#pragma omp simd
    for (int j = 0; j < n; j++)
        inner[j] = 0;
    for (long k = 0; k < w; k++) {
        float *restrict pk = s + k * ld;
        const float *restrict dpk = dp + k * ld;
        const int from = first_counting(k, first);
        memset(pk, 0, (size_t)from * sizeof *pk);
        if (p16) {  /* rounded as made: a second pass over the row cost more than its stores */
            st_bf16 *restrict out = p16 + k * ld;
            memset(out, 0, (size_t)from * sizeof *out);
#pragma omp simd
            for (int j = from; j < n; j++) {
                pk[j] = nn_expf(pk[j] - mx[j]) * inv[j];
                out[j] = st_bf16_from_f32(pk[j]);
                inner[j] += pk[j] * dpk[j];
            }
            continue;
        }
#pragma omp simd
        for (int j = from; j < n; j++) {
            const float pj = nn_expf(pk[j] - mx[j]) * inv[j];
            pk[j] = pj;
            inner[j] += pj * dpk[j];
        }
    }
    for (long k = 0; k < w; k++) {
        const float *restrict pk = s + k * ld;
        float *restrict dpk = dp + k * ld;
        const int from = first_counting(k, first);
        if (ds16) {
            st_bf16 *restrict out = ds16 + k * ld;
            memset(out, 0, (size_t)from * sizeof *out);
#pragma omp simd
            for (int j = from; j < n; j++)
                out[j] = st_bf16_from_f32(pk[j] * (dpk[j] - inner[j]) * scale);
            continue;
        }
        memset(dpk, 0, (size_t)from * sizeof *dpk);
#pragma omp simd
        for (int j = from; j < n; j++)
            dpk[j] = pk[j] * (dpk[j] - inner[j]) * scale;
    }
}

void seq_causal_softmax_again_bwd_cols(float *s, st_bf16 *p16, st_bf16 *ds16, float *dp, const float *max,
                                       const float *inv, long first, long n, float scale)
{
    for (long j0 = 0; j0 < n; j0 += QUERY_BLOCK)
        softmax_again_bwd_cols_block(s + j0, p16 ? p16 + j0 : NULL, ds16 ? ds16 + j0 : NULL, dp + j0, max + j0,
                                     inv + j0, n, first + n, first + j0, (int)min_of(QUERY_BLOCK, n - j0), scale);
}
