/* The collectives PyTorch's process groups need beyond fp32 and bf16 sums:
 * fp16 (its conversions against the compiler's IEEE half), i32 and i64
 * payloads, MAX and MIN, all-gather, reduce-scatter and all-to-all, at 1-4
 * and 8 forked ranks (all-to-all at 16 too), against a serial reference computed with the same
 * definitions, on sizes past a staging area. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forkranks.h"
#include "shmtrain/bf16.h"
#include "shmtrain/fp16.h"

#define STAGING (16u << 10)

/* ------------------------------------------------------------------ fp16 -- */

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Every half against the compiler's conversion; a NaN only as a NaN. */
static void test_fp16_widening_is_exact(void **state)
{
    (void)state;
#ifndef __FLT16_MAX__  /* a compiler without _Float16 here (clang before 15 on x86) */
    skip();
#else
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 r;
        const uint16_t b = (uint16_t)h;
        memcpy(&r, &b, sizeof r);
        const float want = (float)r, got = st_f16_to_f32((st_f16)h);
        if (isnan(want) ? !isnan(got) : bits_of(want) != bits_of(got))
            fail_msg("half %04x: %08x, the compiler's %08x", h, bits_of(got), bits_of(want));
    }
#endif
}

/* Round to nearest even on every exponent (a sweep of the top bits, every
 * low pattern of some), the subnormals, the overflow edge and NaNs. */
static void test_fp16_rounding_is_the_compilers(void **state)
{
    (void)state;
#ifdef __FLT16_MAX__
    uint64_t s = 88172645463325252ull;
    for (uint32_t i = 0; i < (1u << 22); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const uint32_t x = i < (1u << 20) ? i << 12 | (uint32_t)(s & 0xfff) : (uint32_t)s;
        float f;
        memcpy(&f, &x, sizeof f);
        const _Float16 r = (_Float16)f;
        uint16_t want;
        memcpy(&want, &r, sizeof want);
        const st_f16 got = st_f16_from_f32(f);
        if (isnan(f) ? (got & 0x7e00) != 0x7e00 : want != got)
            fail_msg("float %08x: half %04x, the compiler's %04x", x, got, want);
    }
#endif  /* else the stated cases below only */
    assert_int_equal(st_f16_from_f32(65504.0f), 0x7bff);
    assert_int_equal(st_f16_from_f32(65519.99f), 0x7bff);
    assert_int_equal(st_f16_from_f32(65520.0f), 0x7c00);
    assert_int_equal(st_f16_from_f32(0x1p-25f), 0);       /* a tie, to even */
    assert_int_equal(st_f16_from_f32(0x1.8p-25f), 1);
    float in[37], back[37];
    st_f16 mid[37];
    for (int i = 0; i < 37; i++)
        in[i] = (float)(i - 18) * 0.37f;
    st_f16_from_f32_n(mid, in, 37);
    st_f16_to_f32_n(back, mid, 37);
    for (int i = 0; i < 37; i++)
        assert_int_equal(bits_of(back[i]), bits_of(st_f16_to_f32(st_f16_from_f32(in[i]))));
}

/* ------------------------------------------------------------ all-reduce -- */

static const st_dtype TYPES[] = {ST_DTYPE_F32, ST_DTYPE_BF16, ST_DTYPE_F16, ST_DTYPE_F64, ST_DTYPE_I32, ST_DTYPE_I64};

/* Rank q's element i: small values (exact in every type), some negative;
 * i64 ones past 2^32 so a 32-bit slip shows. */
static double value(st_dtype t, int q, size_t i)
{
    const long v = (long)((i * 7 + (size_t)q * 13) % 23) - 11;
    return t == ST_DTYPE_I64 ? (double)v * 4294967296.0 + (double)q : (double)v;
}

static void put(void *buf, st_dtype t, size_t i, double v)
{
    switch (t) {
    case ST_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case ST_DTYPE_BF16: ((st_bf16 *)buf)[i] = st_bf16_from_f32((float)v); break;
    case ST_DTYPE_F16: ((st_f16 *)buf)[i] = st_f16_from_f32((float)v); break;
    case ST_DTYPE_F64: ((double *)buf)[i] = v; break;
    case ST_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

/* The definition: floats summed in fp32 in rank order, divided, rounded
 * once; integers exactly; MAX and MIN exactly. */
static double reference(st_dtype t, st_reduce_op op, int world, size_t i)
{
    double acc = value(t, 0, i);
    float facc = (float)acc;
    for (int q = 1; q < world; q++) {
        const double v = value(t, q, i);
        acc = op == ST_MAX ? fmax(acc, v) : op == ST_MIN ? fmin(acc, v) : acc + v;
        facc = op == ST_MAX ? fmaxf(facc, (float)v) : op == ST_MIN ? fminf(facc, (float)v) : facc + (float)v;
    }
    if (t == ST_DTYPE_I32 || t == ST_DTYPE_I64)
        return acc;
    if (t == ST_DTYPE_F64)
        return op == ST_AVG ? acc / world : acc;
    if (op == ST_AVG)
        facc /= (float)world;
    return t == ST_DTYPE_BF16 ? st_bf16_to_f32(st_bf16_from_f32(facc))
         : t == ST_DTYPE_F16 ? st_f16_to_f32(st_f16_from_f32(facc))
                             : facc;
}

static double get(const void *buf, st_dtype t, size_t i)
{
    switch (t) {
    case ST_DTYPE_F32: return ((const float *)buf)[i];
    case ST_DTYPE_BF16: return st_bf16_to_f32(((const st_bf16 *)buf)[i]);
    case ST_DTYPE_F16: return st_f16_to_f32(((const st_f16 *)buf)[i]);
    case ST_DTYPE_F64: return ((const double *)buf)[i];
    case ST_DTYPE_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

static int check_one(st_group *g, void *buf, st_dtype t, st_reduce_op op, size_t n)
{
    const int rank = st_group_rank(g), world = st_group_size(g);
    for (size_t i = 0; i < n; i++)
        put(buf, t, i, value(t, rank, i));
    const st_status st = st_allreduce(g, buf, n, t, t, op);
    if (op == ST_AVG && (t == ST_DTYPE_I32 || t == ST_DTYPE_I64)) {
        CHILD_CHECK(st == ST_ERR_INVALID && strstr(st_last_error(), "use SUM and divide"));
        return 0;
    }
    CHILD_CHECK(st == ST_OK);
    for (size_t i = 0; i < n; i++)
        if (get(buf, t, i) != reference(t, op, world, i)) {
            fprintf(stderr, "rank %d of %d, %s op %d, n=%zu: [%zu] = %.17g, want %.17g\n", rank, world,
                    st_dtype_name(t), (int)op, n, i, get(buf, t, i), reference(t, op, world, i));
            return 1;
        }
    return 0;
}

static int every_type_and_op(st_group *g, int rank, void *arg)
{
    (void)rank, (void)arg;
    const size_t sizes[] = {1, 7, 1003, 3 * STAGING / 8 + 5};
    size_t zc_bytes;
    void *zc = st_group_buffer(g, &zc_bytes), *priv = malloc(3 * STAGING + 64);
    CHILD_CHECK(zc && priv);
    /* ops innermost: one count and path after another, as a program's calls
     * repeat (the algorithm the group remembers must be the op's) */
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t k = 0; k < sizeof TYPES / sizeof *TYPES; k++)
            for (int in_zc = 0; in_zc < 2; in_zc++)
                for (int op = ST_SUM; op <= ST_MIN; op++)
                    if (check_one(g, in_zc ? zc : priv, TYPES[k], (st_reduce_op)op, sizes[s]))
                        return 1;
    free(priv);
    return 0;
}

static void test_every_type_and_op(void **state)
{
    (void)state;
    const int worlds[] = {1, 2, 3, 4, 8};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        char job[64];
        test_job_id(job, sizeof job, "ops");
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING, .zero_copy_bytes = 3 * STAGING + 64};
        assert_int_equal(run_ranks(worlds[w], &cfg, every_type_and_op, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

/* MAX and MIN keep a NaN whichever rank holds it (PyTorch's maximum and
 * minimum do; fmax would drop it): element i of 3k elements holds a NaN on
 * rank i % world for k = 0 and on no rank for k = 1, 2. */
static int nans_win(st_group *g, int rank, void *arg)
{
    (void)arg;
    const int world = st_group_size(g);
    const st_dtype floats[] = {ST_DTYPE_F32, ST_DTYPE_BF16, ST_DTYPE_F16, ST_DTYPE_F64};
    const size_t n = 3 * (size_t)world;
    char buf[3 * 8 * 8];
    for (size_t k = 0; k < sizeof floats / sizeof *floats; k++)
        for (int op = ST_MAX; op <= ST_MIN; op++) {
            for (size_t i = 0; i < n; i++)
                put(buf, floats[k], i, i < (size_t)world && (int)i == rank ? NAN : (double)(rank + (int)i));
            CHILD_CHECK(st_allreduce(g, buf, n, floats[k], floats[k], (st_reduce_op)op) == ST_OK);
            for (size_t i = 0; i < n; i++) {
                const double want = i < (size_t)world ? NAN : op == ST_MAX ? (double)(world - 1 + (int)i) : (double)i;
                const double got = get(buf, floats[k], i);
                if (isnan(want) ? !isnan(got) : got != want) {
                    fprintf(stderr, "rank %d %s op %d [%zu]: %g, want %g\n", rank, st_dtype_name(floats[k]), op, i,
                            got, want);
                    return 1;
                }
            }
        }
    return 0;
}

static void test_max_min_keep_nans(void **state)
{
    (void)state;
    const int worlds[] = {2, 3, 8};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        char job[64];
        test_job_id(job, sizeof job, "nan");
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING};
        assert_int_equal(run_ranks(worlds[w], &cfg, nans_win, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

/* ------------------------------------------- all-gather, reduce-scatter -- */

static int gathers(st_group *g, int rank, void *arg)
{
    (void)arg;
    const int world = st_group_size(g);
    const size_t sizes[] = {1, 3, 1000, 2 * STAGING + 5};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        unsigned char *send = malloc(n), *recv = malloc(n * (size_t)world);
        CHILD_CHECK(send && recv);
        for (size_t i = 0; i < n; i++)
            send[i] = (unsigned char)(i * 31 + (size_t)rank * 101);
        CHILD_CHECK(st_allgather(g, send, recv, n) == ST_OK);
        for (int q = 0; q < world; q++)
            for (size_t i = 0; i < n; i++)
                CHILD_CHECK(recv[(size_t)q * n + i] == (unsigned char)(i * 31 + (size_t)q * 101));
        /* in place: this rank's part already where it belongs */
        memset(recv, 0, n * (size_t)world);
        memcpy(recv + (size_t)rank * n, send, n);
        CHILD_CHECK(st_allgather(g, recv + (size_t)rank * n, recv, n) == ST_OK);
        for (int q = 0; q < world; q++)
            CHILD_CHECK(recv[(size_t)q * n + n - 1] == (unsigned char)((n - 1) * 31 + (size_t)q * 101));
        free(send);
        free(recv);
    }
    return 0;
}

static int scatters(st_group *g, int rank, void *arg)
{
    (void)arg;
    const int world = st_group_size(g);
    const size_t counts[] = {1, 5, STAGING / 4 + 3};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
        for (size_t k = 0; k < sizeof TYPES / sizeof *TYPES; k++)
            for (int op = ST_SUM; op <= ST_MIN; op++) {
                const st_dtype t = TYPES[k];
                const size_t n = counts[c], es = st_dtype_size(t);
                if (op == ST_AVG && (t == ST_DTYPE_I32 || t == ST_DTYPE_I64))
                    continue;
                char *send = malloc(n * (size_t)world * es), *recv = malloc(n * es);
                CHILD_CHECK(send && recv);
                for (size_t i = 0; i < n * (size_t)world; i++)
                    put(send, t, i, value(t, rank, i));
                CHILD_CHECK(st_reduce_scatter(g, send, recv, n, t, (st_reduce_op)op) == ST_OK);
                for (size_t i = 0; i < n; i++) {
                    const size_t at = (size_t)rank * n + i;
                    if (get(recv, t, i) != reference(t, (st_reduce_op)op, world, at)) {
                        fprintf(stderr, "reduce_scatter rank %d %s op %d n %zu [%zu]: %g want %g\n", rank,
                                st_dtype_name(t), op, n, i, get(recv, t, i), reference(t, (st_reduce_op)op, world, at));
                        return 1;
                    }
                }
                free(send);
                free(recv);
            }
    return 0;
}

static void test_allgather_and_reduce_scatter(void **state)
{
    (void)state;
    const int worlds[] = {1, 2, 3, 4};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        char job[64];
        test_job_id(job, sizeof job, "gather");
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING};
        assert_int_equal(run_ranks(worlds[w], &cfg, gathers, NULL), 0);
        assert_int_equal(run_ranks(worlds[w], &cfg, scatters, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

/* ---------------------------------------------------------- all-to-all -- */

/* Bytes rank p sends rank q in round r: uneven, some none, some past a
 * staging area's share; its own block past a whole staging area (never
 * staged, so it adds no round). */
static size_t a2a_len(int p, int q, int r)
{
    const size_t unit[] = {1, 37, STAGING / 3 + 11};
    return (size_t)((p * 7 + q * 13 + r) % 5) * unit[r % 3] + (p == q) * (size_t)STAGING;
}
static unsigned char a2a_byte(int p, int q, size_t i)
{
    return (unsigned char)(i * 31 + (size_t)p * 101 + (size_t)q * 17);
}

static int alltoalls(st_group *g, int rank, void *arg)
{
    (void)arg;
    const int world = st_group_size(g);
    for (int r = 0; r < 6; r++) {
        unsigned char *send[16], *recv[16];
        size_t send_len[16], recv_len[16], from_peers = 0, written = 0;
        for (int q = 0; q < world; q++) {
            send_len[q] = a2a_len(rank, q, r), recv_len[q] = a2a_len(q, rank, r);
            /* exactly as long as each block (ASan sees a byte past it); no block at all for none */
            send[q] = send_len[q] ? malloc(send_len[q]) : NULL, recv[q] = recv_len[q] ? calloc(recv_len[q], 1) : NULL;
            CHILD_CHECK((send[q] || !send_len[q]) && (recv[q] || !recv_len[q]));
            for (size_t i = 0; i < send_len[q]; i++)
                send[q][i] = a2a_byte(rank, q, i);
            from_peers += q == rank ? 0 : recv_len[q];
            written += send_len[q] + (q == rank ? 0 : recv_len[q]);  /* staged (its own: copied), then read out */
        }
        st_coll_counters before, after;
        st_group_counters(g, &before);
        CHILD_CHECK(st_alltoall(g, (const void *const *)send, send_len, (void *const *)recv, recv_len) == ST_OK);
        st_group_counters(g, &after);
        for (int p = 0; p < world; p++)
            for (size_t i = 0; i < recv_len[p]; i++)
                CHILD_CHECK(recv[p][i] == a2a_byte(p, rank, i));
        /* each peer's block read once from its staging, and the lengths' agreement: nothing more */
        const size_t agreement = world > 1 ? (size_t)(world - 1) * 2 * (size_t)world * sizeof(uint64_t) : 0;
        CHILD_CHECK(after.peer_bytes_read - before.peer_bytes_read == from_peers + agreement);
        const size_t lengths = 2 * (size_t)world * sizeof(uint64_t);  /* the agreement's all-gather writes */
        CHILD_CHECK(after.bytes_written - before.bytes_written ==
                    written + (world > 1 ? lengths * (size_t)(world + 1) : 0));
        /* two synchronisations for the lengths, two a piece of the longest block between two ranks */
        size_t longest = 0, piece = STAGING / (size_t)world;
        for (int p = 0; p < world; p++)
            for (int q = 0; q < world; q++)
                longest = p != q && a2a_len(p, q, r) > longest ? a2a_len(p, q, r) : longest;
        const uint64_t syncs = world > 1 ? 2 + 2 * ((longest + piece - 1) / piece) : 0;
        CHILD_CHECK(after.syncs - before.syncs == syncs);
        for (int q = 0; q < world; q++)
            free(send[q]), free(recv[q]);
    }
    return 0;
}

/* Rank 1 expects one byte more from rank 0 than rank 0 sends: every rank
 * refuses the call by the pair, and the group goes on. */
static int alltoall_disagrees(st_group *g, int rank, void *arg)
{
    (void)arg;
    const int world = st_group_size(g);
    unsigned char buf[16][64] = {{0}}, out[16][64];
    const void *send[16];
    void *recv[16];
    size_t send_len[16], recv_len[16];
    for (int q = 0; q < world; q++)
        send[q] = buf[q], recv[q] = out[q], send_len[q] = recv_len[q] = 16;
    recv_len[0] += rank == 1;
    CHILD_CHECK(st_alltoall(g, send, send_len, recv, recv_len) == ST_ERR_INVALID);
    CHILD_CHECK(strstr(st_last_error(), "rank 0 sends rank 1 16 bytes, rank 1 expects 17") != NULL);
    recv_len[0] = 16;
    CHILD_CHECK(st_alltoall(g, send, send_len, recv, recv_len) == ST_OK);
    return 0;
}

static void test_alltoall(void **state)
{
    (void)state;
    const int worlds[] = {1, 2, 3, 4, 8, 16};  /* 16: oversubscribed on small machines */
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        char job[64];
        test_job_id(job, sizeof job, "a2a");
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING};
        assert_int_equal(run_ranks(worlds[w], &cfg, alltoalls, NULL), 0);
        if (worlds[w] > 1)
            assert_int_equal(run_ranks(worlds[w], &cfg, alltoall_disagrees, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_widening_is_exact),
        cmocka_unit_test(test_fp16_rounding_is_the_compilers),
        cmocka_unit_test(test_every_type_and_op),
        cmocka_unit_test(test_max_min_keep_nans),
        cmocka_unit_test(test_allgather_and_reduce_scatter),
        cmocka_unit_test(test_alltoall),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
