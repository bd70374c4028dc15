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
#include <stdint.h>
#include <string.h>

#include "coll_internal.h"
#include "shmtrain/fp16.h"
#include "../common/multiversion.h"

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

/* body(arg, member, size) for every member of a team of `threads`: on the
 * host's pool where the group has one (st_group_config.team), else
 * OpenMP's.  Either way each member runs once, so the split is the same. */
static void run_team(const st_group *g, int threads, void (*body)(void *arg, int member, int size), void *arg)
{
    if (g->cfg.team) {
        g->cfg.team(g->cfg.team_ctx, threads, body, arg);
        return;
    }
#pragma omp parallel num_threads(threads)
    body(arg, coll_team_member(), coll_team_size());
}

int coll_threads_for(const st_group *g, size_t bytes)
{
    if (bytes < 2 * g->cfg.thread_bytes || g->threads == 1)
        return 1;
    int most = g->threads;
    const int pool = coll_pool_size(&g->cfg);  /* the calling thread's: 1 where the caller said so */
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
    } else {
        st_dtype_convert_n(dst, to, src, from, n);
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

struct gather_team {
    const struct coll_span *spans;
    int nspans;
    st_dtype to, from;
    bool to_user;
    size_t total;
};

static void gather_member(void *arg, int member, int size)
{
    const struct gather_team *j = arg;
    size_t lo, hi;
    share(j->total, size, member, &lo, &hi);
    gather_range(j->spans, j->nspans, j->to, j->from, j->to_user, lo, hi);
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
    struct gather_team job = {spans, nspans, to, from, to_user, total};
    run_team(g, threads, gather_member, &job);
}

/* ----------------------------------------------------------------- sum -- */


enum { BLOCK = 1024 };  /* fp32 sums of 4 KiB stay in L1 while every source streams past */

/* fp32 sources: a block's sums in L1, then stored as fp32 or rounded. */
ST_CLONES_BY_EXTENSION
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
            st_dtype_convert_n((char *)out + b * st_dtype_size(to), to, acc, ST_DTYPE_F32, m);
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

/* ---------------------------------------------------- any type, any op -- */

/* a combined with b by op: MAX and MIN keep the first NaN (rank order). */
static inline float combine_f(float a, float b, st_reduce_op op)
{
    if (op == ST_SUM)
        return a + b;
    if (a != a || b != b)
        return a != a ? a : b;
    return op == ST_MAX ? (b > a ? b : a) : (b < a ? b : a);
}

static inline float load_f(const void *p, st_dtype t, size_t i)
{
    return t == ST_DTYPE_F32 ? ((const float *)p)[i]
         : t == ST_DTYPE_BF16 ? st_bf16_to_f32(((const st_bf16 *)p)[i])
                              : st_f16_to_f32(((const st_f16 *)p)[i]);
}

static inline void store_f(void *p, st_dtype t, size_t i, float v)
{
    if (t == ST_DTYPE_F32)
        ((float *)p)[i] = v;
    else if (t == ST_DTYPE_BF16)
        ((st_bf16 *)p)[i] = st_bf16_from_f32(v);
    else
        ((st_f16 *)p)[i] = st_f16_from_f32(v);
}

/* Integers in two's complement: sums wrap (as unsigned arithmetic does,
 * where a signed overflow would be undefined). */
#define COMBINE_INT(T, U)                                                                                    \
    static void combine_##T(void *out, const void *const *src, int nsrc, st_reduce_op op, size_t lo, size_t hi) \
    {                                                                                                        \
        for (size_t i = lo; i < hi; i++) {                                                                   \
            T v = ((const T *)src[0])[i];                                                                    \
            for (int q = 1; q < nsrc; q++) {                                                                 \
                const T x = ((const T *)src[q])[i];                                                          \
                v = op == ST_SUM ? (T)((U)v + (U)x) : op == ST_MAX ? (x > v ? x : v) : (x < v ? x : v);      \
            }                                                                                                \
            ((T *)out)[i] = v;                                                                               \
        }                                                                                                    \
    }
COMBINE_INT(int32_t, uint32_t)
COMBINE_INT(int64_t, uint64_t)

/* fp64: in fp64, rank order, as fp32's in fp32. */
static void combine_f64(const struct coll_sum *s, void *out, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        double v = ((const double *)s->src[0])[i];
        for (int q = 1; q < s->nsrc; q++) {
            const double x = ((const double *)s->src[q])[i];
            if (s->op == ST_SUM)
                v += x;
            else if (v == v && (x != x || (s->op == ST_MAX ? x > v : x < v)))
                v = x;  /* MAX and MIN keep the first NaN, as combine_f */
        }
        ((double *)out)[i] = s->div != 1.0f ? v / s->div : v;
    }
}

/* Floating types other than the fast paths' (fp16 sums, any MAX or MIN):
 * fp32 in rank order, divided, rounded once into `to`. */
static void combine_float(const struct coll_sum *s, void *out, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        float v = load_f(s->src[0], s->from, i);
        for (int q = 1; q < s->nsrc; q++)
            v = combine_f(v, load_f(s->src[q], s->from, i), s->op);
        store_f(out, s->to, i, s->div != 1.0f ? v / s->div : v);
    }
}

static void sum_range(const struct coll_sum *s, void *out, size_t lo, size_t hi)
{
    if (lo >= hi)
        return;
    if (s->from == ST_DTYPE_I32 || s->from == ST_DTYPE_I64)
        (s->from == ST_DTYPE_I32 ? combine_int32_t : combine_int64_t)(out, s->src, s->nsrc, s->op, lo, hi);
    else if (s->from == ST_DTYPE_F64)
        combine_f64(s, out, lo, hi);
    else if (s->op != ST_SUM || s->from == ST_DTYPE_F16)
        combine_float(s, out, lo, hi);
    else if (s->from == ST_DTYPE_F32)
        sum_f32(out, s->to, (const float *const *)s->src, s->nsrc, lo, hi, s->div);
    else if (s->to == ST_DTYPE_F32)
        sum_bf16_to_f32(out, s->src, s->nsrc, lo, hi, s->div);
    else
        coll_bf16_reduce(out, (uint16_t *const *)s->src, s->nsrc, lo, hi, s->div);
}

struct sum_team {
    const struct coll_sum *s;
    void *out;
    size_t n;
};

static void sum_member(void *arg, int member, int size)
{
    const struct sum_team *j = arg;
    size_t lo, hi;
    share(j->n, size, member, &lo, &hi);
    sum_range(j->s, j->out, lo, hi);
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
    struct sum_team job = {s, out, n};
    run_team(g, threads, sum_member, &job);
}
