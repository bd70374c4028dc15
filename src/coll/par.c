/* The sums and copies of the large-message algorithms, split over the
 * rank's threads.
 *
 * An instance of c cores runs its step on an OpenMP pool of c threads; the
 * collectives use the same pool (whose workers are still spinning when the
 * backward pass hands over to the all-reduce), so a rank's copy and reduce
 * work goes at c cores' bandwidth instead of one.  Work is split by
 * element: every element is computed by one thread in the same order as
 * with one, so the bits do not depend on the thread count.  Bytes are
 * counted here, once per call, before the split.
 */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "coll_internal.h"

/* A thread's share of n elements, cut at multiples of 32 (a 64-byte line
 * of bf16, two of fp32), so no two threads write the same line. */
static void share(size_t n, int threads, int t, size_t *lo, size_t *hi)
{
    const size_t lines = (n + 31) / 32;
    *lo = lines * (size_t)t / (size_t)threads * 32;
    *hi = lines * (size_t)(t + 1) / (size_t)threads * 32;
    if (*lo > n)
        *lo = n;
    if (*hi > n)
        *hi = n;
}

int coll_threads_for(const st_group *g, size_t bytes)
{
    if (bytes < 2 * g->cfg.thread_bytes || g->threads == 1)
        return 1;
    int most = g->threads;
    const int pool = omp_get_max_threads();  /* the calling thread's: 1 where the caller said so */
    if (pool < most)
        most = pool;
    const size_t by_size = bytes / g->cfg.thread_bytes;
    if (by_size < (size_t)most)
        most = (int)by_size;
    return most < 1 ? 1 : most;
}

/* -------------------------------------------------------------- gather -- */

static void convert(void *dst, st_dtype to, const void *src, st_dtype from, size_t n, bool to_user)
{
    if (to == from) {
        if (to_user)
            coll_copy_to_user(dst, src, n * coll_esize(to));
        else
            memcpy(dst, src, n * coll_esize(to));
    } else if (to == ST_DTYPE_F32) {
        st_bf16_to_f32_n(dst, src, n);
    } else {
        st_bf16_from_f32_n(dst, src, n);
    }
}

/* Elements [lo, hi) of the spans laid end to end. */
static void gather_range(const struct coll_span *spans, int nspans, st_dtype to, st_dtype from, bool to_user,
                         size_t lo, size_t hi)
{
    size_t at = 0;
    for (int k = 0; k < nspans && at < hi; k++) {
        const struct coll_span *s = &spans[k];
        const size_t a = lo > at ? lo - at : 0, b = hi - at < s->n ? hi - at : s->n;
        if (a < b)
            convert(coll_elem(s->dst, to, a), to, (const char *)s->src + a * coll_esize(from), from, b - a,
                    to_user);
        at += s->n;
    }
}

void coll_par_gather(st_group *g, const struct coll_span *spans, int nspans, st_dtype to, st_dtype from,
                     bool to_user)
{
    size_t total = 0;
    for (int k = 0; k < nspans; k++) {
        coll_count_read(g, spans[k].owner, spans[k].n * coll_esize(from));
        coll_count_write(g, spans[k].n * coll_esize(to));
        total += spans[k].n;
    }
    const int threads = coll_threads_for(g, total * (coll_esize(from) + coll_esize(to)));
    if (threads == 1) {
        gather_range(spans, nspans, to, from, to_user, 0, total);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        size_t lo, hi;
        share(total, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        gather_range(spans, nspans, to, from, to_user, lo, hi);
    }
}

/* ----------------------------------------------------------------- sum -- */

#define ST_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))

enum { BLOCK = 1024 };  /* fp32 sums of 4 KiB stay in L1 while every source streams past */

/* fp32 sources: a block's sums in L1, then stored as fp32 or rounded. */
ST_MULTIVERSION
static void sum_f32(void *out, st_dtype to, const float *const *src, int nsrc, size_t lo, size_t hi, float div)
{
    float acc[BLOCK] __attribute__((aligned(64)));
    for (size_t b = lo; b < hi; b += BLOCK) {
        const size_t m = hi - b < BLOCK ? hi - b : BLOCK;
        const float *restrict s0 = src[0] + b;
        if (nsrc == 1) {
            memcpy(acc, s0, m * sizeof *acc);
        } else {
            const float *restrict s1 = src[1] + b;
            for (size_t i = 0; i < m; i++)
                acc[i] = s0[i] + s1[i];
        }
        for (int q = 2; q < nsrc; q++) {
            const float *restrict s = src[q] + b;
            for (size_t i = 0; i < m; i++)
                acc[i] += s[i];
        }
        if (div != 1.0f)
            for (size_t i = 0; i < m; i++)
                acc[i] /= div;
        if (to == ST_DTYPE_F32)
            memcpy((float *)out + b, acc, m * sizeof *acc);
        else
            st_bf16_from_f32_n((st_bf16 *)out + b, acc, m);
    }
}

/* bf16 sources summed into fp32 (a stage, or a two-level partial). */
static void sum_bf16_to_f32(float *out, const void *const *src, int nsrc, size_t lo, size_t hi, float div)
{
    coll_bf16_sum(out + lo, (uint16_t *const *)src, nsrc, lo, hi);
    if (div != 1.0f)
        for (size_t i = lo; i < hi; i++)
            out[i] /= div;
}

static void sum_range(const struct coll_sum *s, void *out, size_t lo, size_t hi)
{
    if (lo >= hi)
        return;
    if (s->from == ST_DTYPE_F32)
        sum_f32(out, s->to, (const float *const *)s->src, s->nsrc, lo, hi, s->div);
    else if (s->to == ST_DTYPE_F32)
        sum_bf16_to_f32(out, s->src, s->nsrc, lo, hi, s->div);
    else
        coll_bf16_reduce(out, (uint16_t *const *)s->src, s->nsrc, lo, hi, s->div);
}

void coll_par_sum(st_group *g, const struct coll_sum *s, void *out, size_t n)
{
    const size_t in_bytes = n * coll_esize(s->from);
    for (int q = 0; q < s->nsrc; q++)
        coll_count_read(g, s->owners[q], in_bytes);
    coll_count_write(g, n * coll_esize(s->to));
    const int threads = coll_threads_for(g, in_bytes * (size_t)s->nsrc);
    if (threads == 1) {
        sum_range(s, out, 0, n);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        size_t lo, hi;
        share(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        sum_range(s, out, lo, hi);
    }
}
