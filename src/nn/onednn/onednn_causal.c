/* Causal attention's products as oneDNN matmul primitives (onednn_causal.h).
 *
 * A stripe s holds query rows f = s * rows .. f + n - 1 (n = rows, fewer
 * in the last) and reaches key w = f + n.  Its scores, P, dP and dS are
 * held transposed, w keys by n queries: oneDNN 3.2 ran S = Q_f K_w^T (n x w)
 * on AVX512-BF16's brgemm, not AMX's, wherever w passed 512 (at a fifth of
 * the transposed product's rate, 114 against 600 GFLOP/s at w 960 on a
 * Xeon with AMX: 3.2 of a head's 5.4 ms of products in oneDNN's verbose
 * log), and the transposed softmax keeps each query's statistics in a
 * vector lane.  Its primitives, one set per
 * stripe (oneDNN 3.2 takes no runtime dimensions in brgemm matmul: its
 * gemm:jit fallback packs both operands each call):
 *   SCORES_SCALED  S^T = K_w Q_f^T / sqrt(hs)  w x hs . hs x n -> w x n
 *   SCORES         dP^T = V_w dY_f^T           the same shapes, no scale
 *   MIX            Y_f = P V_w, dQ_f = dS K_w   (w x n)^T . w x hs -> n x hs
 *   ADD            dK_w += dS^T Q_f, dV_w += P^T dY_f   w x n . n x hs -> w x hs,
 *                  added to the head's dK and dV (fp32, in the scratch)
 * Q_f^T and P, dS (from their transposes) are read through strides, so no
 * operand is transposed by hand.  The backward pass makes P again from
 * each query's max and sum's reciprocal, which the forward pass leaves in
 * the caller's statistics: one pass over a stripe makes P and rowsum(P dP)
 * where the softmax again took three.  dK and dV grow a stripe at a time:
 * the stripe's transposes are their products' dense left operands as they
 * lie (the key-by-key column blocks they replaced were copied there 128
 * bytes at a time, a seventh of a head's time in memmove).  Each is made
 * with one OpenMP thread (its blocking, and the primitive cache's key, for
 * one) and a user scratchpad, so any thread may run it on its own scratch;
 * the thread's memory objects get the operands' addresses at each call. */
#include "onednn_causal.h"

#include <dnnl_debug.h>

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/seq_kernels.h"
#include "shmtrain/bf16.h"

enum { SCORES_SCALED, SCORES, MIX, ADD, KINDS };
enum { SRC, WEIGHTS, DST, PAD, ARGS };

struct dn_causal {
    long t, hs, rows, stripes;
    int threads;
    bool f32;                  /* fp32 operands (an fp32 net's), else bf16 */
    dnnl_primitive_t *prim;    /* stripes x KINDS */
    dnnl_memory_t *mem;        /* threads x stripes x KINDS x ARGS (PAD NULL where none is needed) */
    dnnl_stream_t *streams;    /* threads */
    size_t pad_bytes, scratch_bytes;
    bool reference;
    char impl[96];
};

static long min_of(long a, long b) { return a < b ? a : b; }
static size_t lines(size_t bytes) { return (bytes + 63) / 64 * 64; }
static long rows_of(const dn_causal *c, long s) { return min_of(c->rows, c->t - s * c->rows); }

static st_status failed(const char *call, dnnl_status_t s)
{
    return st_fail(ST_ERR_BACKEND, "oneDNN: %.*s failed in attention's products: %s", (int)strcspn(call, "("), call,
                   dnnl_status2str(s));
}

#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        const dnnl_status_t s_ = (call);                                                                               \
        if (s_ != dnnl_success) {                                                                                      \
            st = failed(#call, s_);                                                                                    \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

/* The thread's buffers, carved from its scratch. */
struct head_bufs {
    void *q, *k, *v, *dy;      /* t x hs each, dense, in the operands' type */
    st_bf16 *p16, *ds16;       /* w x n: a stripe's P^T and dS^T in bf16 (none for fp32 operands) */
    float *s, *ds;             /* w x n: scores^T, then P^T; dP^T, then dS^T where fp32 */
    float *out;                /* n x hs: a product's rows before their place in y or dq */
    float *dk, *dv;            /* t x hs: the head's dK and dV, a stripe's terms added at a time */
    void *pad;
};

static size_t operand_bytes(const dn_causal *c) { return c->f32 ? 4 : 2; }

static size_t carve(const dn_causal *c, char *base, struct head_bufs *h)
{
    const size_t head = (size_t)(c->t * c->hs), stripe = (size_t)(c->rows * c->t), es = operand_bytes(c);
    const size_t rounded = c->f32 ? 0 : lines(stripe * 2);
    size_t at = 0;
#define TAKE(field, bytes) (h->field = (void *)(base && (bytes) ? base + at : NULL), at += (bytes))
    TAKE(q, lines(head * es)), TAKE(k, lines(head * es)), TAKE(v, lines(head * es)), TAKE(dy, lines(head * es));
    TAKE(p16, rounded), TAKE(ds16, rounded), TAKE(s, lines(stripe * 4)), TAKE(ds, lines(stripe * 4));
    TAKE(out, lines((size_t)(c->rows * c->hs) * 4)), TAKE(dk, lines(head * 4)), TAKE(dv, lines(head * 4));
    TAKE(pad, lines(c->pad_bytes));
#undef TAKE
    return at;
}

bool dn_causal_fits(const dn_causal *c, long t, long hs, bool f32) { return c->t == t && c->hs == hs && c->f32 == f32; }
size_t dn_causal_scratch_bytes(const dn_causal *c) { return c->scratch_bytes; }
const char *dn_causal_impl(const dn_causal *c) { return c->impl; }
bool dn_causal_is_reference(const dn_causal *c) { return c->reference; }

/* ------------------------------------------------------------ building -- */

/* One product of stripe s: its operands' shapes and strides (the first
 * dense, transposed or not, for brgemm). */
static void product_shape(const dn_causal *c, long s, int kind, dnnl_dims_t dims[3], dnnl_dims_t strides[3])
{
    const long n = rows_of(c, s), w = s * c->rows + n, hs = c->hs;
    if (kind == SCORES_SCALED || kind == SCORES) {
        memcpy(dims, (dnnl_dims_t[3]){{w, hs}, {hs, n}, {w, n}}, 3 * sizeof *dims);
        memcpy(strides, (dnnl_dims_t[3]){{hs, 1}, {1, hs}, {n, 1}}, 3 * sizeof *strides);
    } else if (kind == MIX) {
        memcpy(dims, (dnnl_dims_t[3]){{n, w}, {w, hs}, {n, hs}}, 3 * sizeof *dims);
        memcpy(strides, (dnnl_dims_t[3]){{1, n}, {hs, 1}, {hs, 1}}, 3 * sizeof *strides);
    } else {
        memcpy(dims, (dnnl_dims_t[3]){{w, n}, {n, hs}, {w, hs}}, 3 * sizeof *dims);
        memcpy(strides, (dnnl_dims_t[3]){{n, 1}, {hs, 1}, {hs, 1}}, 3 * sizeof *strides);
    }
}

/* The scores' scale, or ADD's sum onto what its destination holds. */
static st_status make_attr(dnnl_primitive_attr_t *attr, int kind, float scale)
{
    st_status st = ST_OK;
    dnnl_post_ops_t ops = NULL;
    TRY(dnnl_primitive_attr_create(attr));
    TRY(dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user));
    if (kind == SCORES_SCALED || kind == ADD) {
        TRY(dnnl_post_ops_create(&ops));
        if (kind == ADD)
            TRY(dnnl_post_ops_append_sum(ops, 1.0f, 0, dnnl_data_type_undef));
        else
            TRY(dnnl_post_ops_append_eltwise(ops, dnnl_eltwise_linear, scale, 0.0f));
        TRY(dnnl_primitive_attr_set_post_ops(*attr, ops));
    }
done:
    if (ops)
        dnnl_post_ops_destroy(ops);
    return st;
}

/* The kernels oneDNN chose, each named once ("brg:avx512_core_amx+gemm:jit:bf16"). */
static void note_impl(dn_causal *c, const char *impl)
{
    const size_t have = strlen(c->impl);
    c->reference = c->reference || strncmp(impl, "ref", 3) == 0;
    if (!strstr(c->impl, impl))
        snprintf(c->impl + have, sizeof c->impl - have, "%s%s", have ? "+" : "", impl);
}

/* The primitive and each thread's memory objects for one product. */
static st_status make_product(dn_causal *c, dnnl_engine_t engine, long s, int kind)
{
    st_status st = ST_OK;
    dnnl_dims_t dims[3], strides[3];
    dnnl_memory_desc_t md[3] = {NULL, NULL, NULL};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    product_shape(c, s, kind, dims, strides);
    for (int a = 0; a < 3; a++)
        TRY(dnnl_memory_desc_create_with_strides(&md[a], 2, dims[a], a == DST || c->f32 ? dnnl_f32 : dnnl_bf16,
                                                 strides[a]));
    if ((st = make_attr(&attr, kind, 1.0f / sqrtf((float)c->hs))) != ST_OK)
        goto done;
    TRY(dnnl_matmul_primitive_desc_create(&pd, engine, md[SRC], md[WEIGHTS], NULL, md[DST], attr));
    TRY(dnnl_primitive_create(&c->prim[s * KINDS + kind], pd));
    const_dnnl_memory_desc_t pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const size_t pad_bytes = pad ? dnnl_memory_desc_get_size(pad) : 0;
    c->pad_bytes = pad_bytes > c->pad_bytes ? pad_bytes : c->pad_bytes;
    for (int th = 0; th < c->threads; th++) {
        dnnl_memory_t *m = c->mem + (((size_t)th * c->stripes + s) * KINDS + kind) * ARGS;
        for (int a = 0; a < 3; a++)
            TRY(dnnl_memory_create(&m[a], md[a], engine, DNNL_MEMORY_NONE));
        if (pad_bytes)
            TRY(dnnl_memory_create(&m[PAD], pad, engine, DNNL_MEMORY_NONE));
    }
    const char *impl = "";
    TRY(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    note_impl(c, impl);
done:
    for (int a = 0; a < 3; a++)
        if (md[a])
            dnnl_memory_desc_destroy(md[a]);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return st;
}

/* Made for one thread: oneDNN blocks a product for the threads it may use,
 * and on a compute thread it gets one. */
static st_status make_products(dn_causal *c, dnnl_engine_t engine)
{
    const int was = omp_get_max_threads();
    st_status st = ST_OK;
    omp_set_num_threads(1);
    for (long s = 0; s < c->stripes && st == ST_OK; s++)
        for (int kind = 0; kind < KINDS && st == ST_OK; kind++)
            st = make_product(c, engine, s, kind);
    omp_set_num_threads(was);
    return st;
}

st_status dn_causal_create(dn_causal **out, dnnl_engine_t engine, long t, long hs, long rows, int threads, bool f32)
{
    *out = NULL;
    if (t < 1 || hs < 1 || rows < 1 || threads < 1)
        return st_fail(ST_ERR_INVALID, "attention's products: T %ld, head size %ld, stripes of %ld rows, %d threads",
                       t, hs, rows, threads);
    st_status st = ST_OK;
    dn_causal *c = calloc(1, sizeof *c);
    if (!c)
        return st_fail(ST_ERR_NOMEM, "attention's products: out of memory");
    *c = (dn_causal){.t = t, .hs = hs, .rows = rows, .stripes = (t + rows - 1) / rows, .threads = threads,
                     .f32 = f32};
    c->prim = calloc((size_t)(c->stripes * KINDS), sizeof *c->prim);
    c->mem = calloc((size_t)threads * (size_t)(c->stripes * KINDS * ARGS), sizeof *c->mem);
    c->streams = calloc((size_t)threads, sizeof *c->streams);
    if (!c->prim || !c->mem || !c->streams) {
        st = st_fail(ST_ERR_NOMEM, "attention's products: out of memory for %ld stripes", c->stripes);
        goto done;
    }
    if ((st = make_products(c, engine)) != ST_OK)
        goto done;
    for (int th = 0; th < threads; th++)
        TRY(dnnl_stream_create(&c->streams[th], engine, dnnl_stream_default_flags));
    c->scratch_bytes = carve(c, NULL, &(struct head_bufs){0});
done:
    if (st != ST_OK)
        dn_causal_destroy(c);
    else
        *out = c;
    return st;
}

void dn_causal_destroy(dn_causal *c)
{
    if (!c)
        return;
    for (size_t i = 0; c->mem && i < (size_t)c->threads * (size_t)(c->stripes * KINDS * ARGS); i++)
        if (c->mem[i])
            dnnl_memory_destroy(c->mem[i]);
    for (long i = 0; c->prim && i < c->stripes * KINDS; i++)
        if (c->prim[i])
            dnnl_primitive_destroy(c->prim[i]);
    for (int th = 0; c->streams && th < c->threads; th++)
        if (c->streams[th])
            dnnl_stream_destroy(c->streams[th]);
    free(c->prim), free(c->mem), free(c->streams);
    free(c);
}

/* ------------------------------------------------------------- running -- */

/* dst = the product `kind` of stripe s on thread th's objects. */
static st_status run(const dn_causal *c, int th, long s, int kind, const void *a, const void *b, void *dst, void *pad)
{
    st_status st = ST_OK;
    dnnl_memory_t *m = c->mem + (((size_t)th * c->stripes + s) * KINDS + kind) * ARGS;
    void *const at[ARGS] = {(void *)a, (void *)b, dst, pad};
    static const int keys[ARGS] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    dnnl_exec_arg_t args[ARGS];
    int n = 0;
    for (int i = 0; i < ARGS; i++)
        if (m[i]) {
            TRY(dnnl_memory_set_data_handle(m[i], at[i]));
            args[n++] = (dnnl_exec_arg_t){keys[i], m[i]};
        }
    TRY(dnnl_primitive_execute(c->prim[s * KINDS + kind], c->streams[th], n, args));
done:
    return st;
}

/* dst (t x hs, dense, in the operands' type) = the head's rows from
 * column col: copied where of that type, else rounded to bf16 or widened. */
static void pack_head(const dn_causal *c, void *dst, dn_rows src, long col)
{
    const long t = c->t, hs = c->hs;
    for (long i = 0; i < t; i++) {
        const void *row = dn_rows_at(src, i, col);
        if ((src.type == ST_DTYPE_BF16) == !c->f32)
            memcpy((char *)dst + i * hs * operand_bytes(c), row, (size_t)hs * operand_bytes(c));
        else if (c->f32)
            st_bf16_to_f32_n((float *)dst + i * hs, row, (size_t)hs);
        else
            st_bf16_from_f32_n((st_bf16 *)dst + i * hs, row, (size_t)hs);
    }
}

/* Row i of a packed head. */
static void *packed_row(const dn_causal *c, void *head, long i)
{
    return (char *)head + (size_t)(i * c->hs) * operand_bytes(c);
}

/* P^T of stripe s: scores^T, then the fp32 softmax, rounded to bf16 into
 * h->p16 (w x n), each query's max and reciprocal into the statistics; the
 * fp32 P^T stays in h->s where kept: keep's rows f.. (t floats, zeros right
 * of the diagonal) take P where given. */
static st_status stripe_weights(const dn_causal *c, int th, const struct head_bufs *h, long s, float *keep,
                                float *stats)
{
    const long f = s * c->rows, n = rows_of(c, s);
    const st_status st = run(c, th, s, SCORES_SCALED, h->k, packed_row(c, h->q, f), h->s, h->pad);
    if (st != ST_OK)
        return st;
    seq_causal_softmax_cols(h->s, h->p16, f, n, keep != NULL, stats + f, stats + c->t + f);
    return ST_OK;
}

/* The caller's rows f.. of P (t floats each, zeros right of the diagonal)
 * from the stripe's fp32 P^T in h->s. */
static void keep_weights(const dn_causal *c, const struct head_bufs *h, long s, float *keep)
{
    const long f = s * c->rows, n = rows_of(c, s), w = f + n;
    for (long r = 0; keep && r < n; r++) {
        for (long k = 0; k < w; k++)
            keep[(f + r) * c->t + k] = h->s[k * n + r];
        memset(keep + (f + r) * c->t + w, 0, (size_t)(c->t - w) * sizeof *keep);
    }
}

/* dst's rows from (row, col) = out's n x hs, a product's rows, rounded to
 * bf16 where dst is. */
static void place(dn_rows dst, long row, long col, const float *out, long n, long hs)
{
    for (long r = 0; r < n; r++)
        if (dst.type == ST_DTYPE_BF16)
            st_bf16_from_f32_n(dn_rows_at(dst, row + r, col), out + r * hs, (size_t)hs);
        else
            memcpy(dn_rows_at(dst, row + r, col), out + r * hs, (size_t)hs * sizeof *out);
}

/* dst's rows f.. = M X: M^T (P^T or dS^T, w x n) in mt, X V or K. */
static st_status stripe_mix(const dn_causal *c, int th, const struct head_bufs *h, long s, const void *mt,
                            const void *x, dn_rows dst)
{
    const st_status st = run(c, th, s, MIX, mt, x, h->out, h->pad);
    if (st == ST_OK)
        place(dst, s * c->rows, 0, h->out, rows_of(c, s), c->hs);
    return st;
}

st_status dn_causal_forward(const dn_causal *c, int thread, dn_rows y, float *p, dn_rows qkv, float *stats,
                            void *scratch)
{
    const long cc = qkv.ld / 3;
    struct head_bufs h;
    carve(c, scratch, &h);
    pack_head(c, h.q, qkv, 0);
    pack_head(c, h.k, qkv, cc);
    pack_head(c, h.v, qkv, 2 * cc);
    st_status st = ST_OK;
    for (long s = 0; s < c->stripes && st == ST_OK; s++)
        if ((st = stripe_weights(c, thread, &h, s, p, stats)) == ST_OK) {
            keep_weights(c, &h, s, p);
            st = stripe_mix(c, thread, &h, s, c->f32 ? (void *)h.s : h.p16, h.v, y);  /* Y = P V */
        }
    return st;
}

/* One stripe of the backward pass: S, dP = dY V^T, P again and dS in one
 * pass, dQ = dS K, and the stripe's terms of dK = dS^T Q and dV = P^T dY. */
static st_status backward_stripe(const dn_causal *c, int th, const struct head_bufs *h, long s, dn_rows dq,
                                 float *keep, const float *stats)
{
    const long f = s * c->rows, n = rows_of(c, s);
    const void *q_f = packed_row(c, h->q, f), *dy_f = packed_row(c, h->dy, f);
    st_status st = run(c, th, s, SCORES_SCALED, h->k, q_f, h->s, h->pad);
    if (st == ST_OK)
        st = run(c, th, s, SCORES, h->v, dy_f, h->ds, h->pad);
    if (st != ST_OK)
        return st;
    seq_causal_softmax_again_bwd_cols(h->s, h->p16, h->ds16, h->ds, stats + f, stats + c->t + f, f, n,
                                      1.0f / sqrtf((float)c->hs));
    keep_weights(c, h, s, keep);
    const void *pt = c->f32 ? (void *)h->s : h->p16, *dst = c->f32 ? (void *)h->ds : h->ds16;
    if ((st = stripe_mix(c, th, h, s, dst, h->k, dq)) == ST_OK &&
        (st = run(c, th, s, ADD, dst, q_f, h->dk, h->pad)) == ST_OK)
        st = run(c, th, s, ADD, pt, dy_f, h->dv, h->pad);
    return st;
}

st_status dn_causal_backward(const dn_causal *c, int thread, dn_rows dqkv, float *p, dn_rows dy, dn_rows qkv,
                             const float *stats, void *scratch)
{
    const long cc = qkv.ld / 3, hs = c->hs;
    struct head_bufs h;
    carve(c, scratch, &h);
    pack_head(c, h.q, qkv, 0);
    pack_head(c, h.k, qkv, cc);
    pack_head(c, h.v, qkv, 2 * cc);
    pack_head(c, h.dy, dy, 0);
    memset(h.dk, 0, (size_t)(c->t * hs) * sizeof *h.dk);
    memset(h.dv, 0, (size_t)(c->t * hs) * sizeof *h.dv);
    st_status st = ST_OK;
    for (long s = 0; s < c->stripes && st == ST_OK; s++)
        st = backward_stripe(c, thread, &h, s, dqkv, p, stats);
    if (st == ST_OK) {
        place(dqkv, 0, cc, h.dk, c->t, hs);
        place(dqkv, 0, 2 * cc, h.dv, c->t, hs);
    }
    return st;
}
