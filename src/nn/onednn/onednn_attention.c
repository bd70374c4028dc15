/* Causal attention, the layer: every sample's every head a task over the
 * threads, each thread with its own scratch, through one of six kernels
 * chosen in one place (choose_kernel):
 *   fp32 short   causal_small.c's short-context heads in AVX-512 registers:
 *                an fp32 net's where the head fits (T up to 256, head size
 *                16 to 64; gpt-mini's head 2.0-2.2x the matmul's speed on a
 *                Zen 4 core, gpt's 1.2-1.3x; docs/benchmarks.md 0zb);
 *   bf16 short   the same on a bf16 net's short heads (T x head size up
 *                to 4096, SMALL_BF16_MAX_AREA), P and dS rounded
 *                to bf16 values before their products (the bf16 net's
 *                definition) and the rows widened and narrowed a head at a
 *                time as the dot products' are (0zc);
 *   fp32 tiles   causal.c's tiles, P and dS whole in the thread's scratch
 *                (SHMTRAIN_ATTENTION_TILES, or oneDNN's reference kernels);
 *   fp32 matmul  onednn_causal.c's oneDNN matmul primitives in stripes on
 *                fp32 operands: an fp32 attention's elsewhere (a head 2.2x
 *                the tiles' speed on an AVX-512 core, 1.3x under oneDNN's
 *                AVX2 gemm; docs/benchmarks.md 0s);
 *   dot          causal_bf16.c's AVX512-BF16 dot products in stripes of
 *                rows (a bf16 net's past T 256 without AMX: gpt2's);
 *   bf16 matmul  the same primitives on bf16 operands (on AMX's tiles
 *                where it has them): a bf16 net's past the short kernel where
 *                oneDNN has AMX (gpt2's T 1024; a head 2.5x the dot
 *                products' speed, gpt2's bf16 step 1.18x, 0o) or T is up
 *                to 256 (MATMUL_BF16_MAX_T_WITHOUT_AMX; gpt's, 0zc); at
 *                T 1024 without AMX a head ran 1-17% slower than the dot
 *                products (0l, 11-12% in 0o).  SHMTRAIN_ATTENTION_DOT and
 *                _MATMUL force either.
 *
 * Attention keeps no T x T matrix between its passes: the forward pass
 * makes P for one sample and head in its thread's scratch and drops it,
 * and the backward pass computes it again, with the same kernels in the
 * same order, so the same bits.  Kept for the whole batch, P was
 * batch x heads x T x T floats a layer (604 MB in each of gpt2's 12 blocks
 * at its recipe's batch 12); computed twice, it costs one more scores
 * product and softmax per head, a sixth of attention's products (the
 * matmul kernel keeps each query's softmax max and reciprocal, 2T floats a
 * head, so its backward makes P in one pass without the softmax's
 * reductions).  One
 * scratch serves every attention layer, since they run one at a time (one a
 * layer was 1-2 GB of gpt2 on 16 threads), a whole number of cache lines a
 * thread so no two threads share one. */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/causal.h"
#include "kernels/causal_bf16.h"
#include "kernels/causal_small.h"
#include "kernels/seq_kernels.h"
#include "onednn_internal.h"

/* The rows of a stripe of the matmul kernel: the best of 32, 64, 128 and
 * 256 measured on AVX512-BF16, 128 within 2% (docs/benchmarks.md, 0l). */
#define MATMUL_STRIPE_ROWS 64

enum { KERNEL_FP32, KERNEL_FP32_MATMUL, KERNEL_FP32_SMALL, KERNEL_BF16_SMALL, KERNEL_DOT, KERNEL_MATMUL };

/* One layer's pass: Q, K and V of sample b's head h are qkv's rows from
 * b * t, columns h * hs (and C, 2C further) of 3C; y, dy rows of C.  Each
 * edge fp32 or bf16 (the plan's): the input's (qkv and its gradient) and
 * the output's (y and dy); the fp32 kernel's are fp32. */
struct head_job {
    const struct xnode *x;
    long t, c, hs;
    dn_rows qkv, dy;
    dn_rows out;   /* forward: y; backward: the qkv gradient */
    float *stats;  /* matmul: each head's softmax statistics, 2t floats (the layer's seq.stats) */
};

/* Sample b's head h of rows r. */
static dn_rows head_of(const struct head_job *j, dn_rows r, long b, long h)
{
    r.at = dn_rows_at(r, b * j->t, h * j->hs);
    return r;
}

/* fp32: P, then dS, then K or V transposed (causal_scores) in the scratch. */
static size_t fp32_scratch(const struct xnode *x, long t, long hs) { return (void)x, (size_t)(2 * t * t + t * hs) * 4; }

static void fp32_weights(float *p, const float *q, long t, long c, long hs, float *kt)
{
    causal_scores(p, t, hs, 1.0f / sqrtf((float)hs), q, 3 * c, q + c, 3 * c, kt);
    seq_causal_softmax(p, t);
}

static st_status fp32_fwd(const struct head_job *j, long b, long h, float *p)
{
    const float *q = head_of(j, j->qkv, b, h).at;
    fp32_weights(p, q, j->t, j->c, j->hs, p + 2 * j->t * j->t);
    causal_mix(head_of(j, j->out, b, h).at, j->c, p, j->t, j->hs, q + 2 * j->c, 3 * j->c);
    return ST_OK;
}

/* P again; dP = dY V^T; dS = P (dP - rowsum(P dP)) / sqrt(hs); dQ = dS K,
 * dK = dS^T Q, dV = P^T dY, each head writing its own columns of dqkv. */
static st_status fp32_bwd(const struct head_job *j, long b, long h, float *p)
{
    const long t = j->t, c = j->c, hs = j->hs, row = 3 * c;
    const float *q = head_of(j, j->qkv, b, h).at, *g = head_of(j, j->dy, b, h).at;
    float *ds = p + t * t, *kt = ds + t * t, *dq = head_of(j, j->out, b, h).at;
    fp32_weights(p, q, t, c, hs, kt);
    causal_scores(ds, t, hs, 1.0f, g, c, q + 2 * c, row, kt);
    seq_causal_softmax_bwd(ds, p, t, 1.0f / sqrtf((float)hs));
    causal_mix(dq, row, ds, t, hs, q + c, row);
    causal_mix_t(dq + c, row, ds, t, hs, q, row);
    causal_mix_t(dq + 2 * c, row, p, t, hs, g, c);
    return ST_OK;
}

/* A kernel's scratch, then from the next cache line a widening area of
 * 7 t hs floats: a head's Q, K and V side by side (3 hs floats a row), its
 * dY, then its results (up to 3 hs a row) as dense fp32. */
static size_t with_wide_area(size_t kernel_bytes, long t, long hs)
{
    return (kernel_bytes + 63) / 64 * 64 + (size_t)(7 * t * hs) * 4;
}

static float *wide_area(float *scratch, size_t kernel_bytes)
{
    return scratch + (kernel_bytes + 63) / 64 * 16;
}

/* The dot products read and write fp32 rows: a head's bf16 rows are
 * widened into the thread's scratch first and its bf16 results narrowed
 * from there, a head's rows at a time while they are in cache. */
static size_t dot_scratch(const struct xnode *x, long t, long hs)
{
    return (void)x, with_wide_area(causal_bf16_scratch_bytes(t, hs), t, hs);
}

/* parts column blocks of a head's rows (c apart) <-> dense [t, parts * hs] fp32. */
static float *widened(float *dense, dn_rows r, long c, long t, long hs, int parts)
{
    if (r.type != ST_DTYPE_BF16)
        return r.at;
    for (int k = 0; k < parts; k++)
        st_bf16_to_f32_rows(dense + k * hs, (size_t)(parts * hs), dn_rows_at(r, 0, k * c), (size_t)r.ld, (size_t)t,
                            (size_t)hs);
    return dense;
}

static void narrow(dn_rows r, const float *dense, long c, long t, long hs, int parts)
{
    for (int k = 0; r.type == ST_DTYPE_BF16 && k < parts; k++)
        st_bf16_from_f32_rows(dn_rows_at(r, 0, k * c), (size_t)r.ld, dense + k * hs, (size_t)(parts * hs), (size_t)t,
                              (size_t)hs);
}

static st_status dot_fwd(const struct head_job *j, long b, long h, float *scratch)
{
    const long t = j->t, c = j->c, hs = j->hs;
    float *wide = wide_area(scratch, causal_bf16_scratch_bytes(t, hs)), *y32 = wide + 4 * t * hs;
    const dn_rows qkv = head_of(j, j->qkv, b, h), y = head_of(j, j->out, b, h);
    const float *q = widened(wide, qkv, c, t, hs, 3);
    const bool y_narrow = y.type == ST_DTYPE_BF16, qkv_narrow = qkv.type == ST_DTYPE_BF16;
    causal_bf16_forward(y_narrow ? y32 : y.at, y_narrow ? hs : c, NULL, q, qkv_narrow ? 3 * hs : 3 * c, t, hs, scratch);
    narrow(y, y32, c, t, hs, 1);
    return ST_OK;
}

static st_status dot_bwd(const struct head_job *j, long b, long h, float *scratch)
{
    const long t = j->t, c = j->c, hs = j->hs;
    float *wide = wide_area(scratch, causal_bf16_scratch_bytes(t, hs)), *dq32 = wide + 4 * t * hs;
    const dn_rows qkv = head_of(j, j->qkv, b, h), dy = head_of(j, j->dy, b, h), dq = head_of(j, j->out, b, h);
    const float *q = widened(wide, qkv, c, t, hs, 3), *g = widened(wide + 3 * t * hs, dy, c, t, hs, 1);
    const bool dq_narrow = dq.type == ST_DTYPE_BF16, dy_narrow = dy.type == ST_DTYPE_BF16,
               qkv_narrow = qkv.type == ST_DTYPE_BF16;
    causal_bf16_backward(dq_narrow ? dq32 : dq.at, NULL, g, dy_narrow ? hs : c, q, qkv_narrow ? 3 * hs : 3 * c, t, hs,
                         scratch);
    narrow(dq, dq32, c, t, hs, 3);
    return ST_OK;
}

static size_t matmul_scratch(const struct xnode *x, long t, long hs)
{
    return (void)t, (void)hs, dn_causal_scratch_bytes(dn_state(x)->seq.causal);
}

static float *stats_of(const struct head_job *j, long b, long h)
{
    return j->stats + (b * (j->c / j->hs) + h) * 2 * j->t;
}

static st_status matmul_fwd(const struct head_job *j, long b, long h, float *scratch)
{
    return dn_causal_forward(dn_state(j->x)->seq.causal, omp_get_thread_num(), head_of(j, j->out, b, h), NULL,
                             head_of(j, j->qkv, b, h), stats_of(j, b, h), scratch);
}

static st_status matmul_bwd(const struct head_job *j, long b, long h, float *scratch)
{
    return dn_causal_backward(dn_state(j->x)->seq.causal, omp_get_thread_num(), head_of(j, j->out, b, h), NULL,
                              head_of(j, j->dy, b, h), head_of(j, j->qkv, b, h), stats_of(j, b, h), scratch);
}

/* The short-context kernel reads and writes an fp32 net's rows where they
 * lie: Q, K, V in qkv's, the gradients into the qkv gradient's columns. */
static size_t small_scratch(const struct xnode *x, long t, long hs)
{
    return (void)x, causal_small_scratch_bytes(t, hs);
}

static st_status small_fwd(const struct head_job *j, long b, long h, float *scratch)
{
    const float *q = head_of(j, j->qkv, b, h).at;
    causal_small_forward(head_of(j, j->out, b, h).at, j->c, q, q + j->c, q + 2 * j->c, 3 * j->c, j->t, j->hs,
                         stats_of(j, b, h), scratch, CAUSAL_SMALL_FP32);
    return ST_OK;
}

static st_status small_bwd(const struct head_job *j, long b, long h, float *scratch)
{
    const long c = j->c;
    const float *q = head_of(j, j->qkv, b, h).at;
    float *dq = head_of(j, j->out, b, h).at;
    causal_small_backward(dq, dq + c, dq + 2 * c, 3 * c, head_of(j, j->dy, b, h).at, c, q, q + c, q + 2 * c, 3 * c,
                          j->t, j->hs, stats_of(j, b, h), scratch, CAUSAL_SMALL_FP32);
    return ST_OK;
}

/* In a bf16 net the same kernel takes the head's rows widened into the
 * thread's scratch as the dot products do (an fp32 edge's rounded there
 * to bf16 values, as the products' operands are), rounds P and dS, and
 * writes its results there to be narrowed. */
static size_t small_bf16_scratch(const struct xnode *x, long t, long hs)
{
    return (void)x, with_wide_area(causal_small_scratch_bytes(t, hs), t, hs);
}

/* A head's rows as bf16 values in dense [t, parts * hs] fp32. */
static const float *bf16_values(float *dense, dn_rows r, long c, long t, long hs, int parts)
{
    if (r.type == ST_DTYPE_BF16)
        return widened(dense, r, c, t, hs, parts);
    for (long i = 0; i < t; i++)
        for (int k = 0; k < parts; k++) {
            const float *src = dn_rows_at(r, i, k * c);
            for (long d = 0; d < hs; d++)
                dense[(i * parts + k) * hs + d] = st_bf16_to_f32(st_bf16_from_f32(src[d]));
        }
    return dense;
}

/* dense [t, parts * hs] into a head's rows, rounded where they are bf16. */
static void store(dn_rows r, const float *dense, long c, long t, long hs, int parts)
{
    if (r.type == ST_DTYPE_BF16)
        narrow(r, dense, c, t, hs, parts);
    for (long i = 0; r.type != ST_DTYPE_BF16 && i < t; i++)
        for (int k = 0; k < parts; k++)
            memcpy(dn_rows_at(r, i, k * c), dense + (i * parts + k) * hs, (size_t)hs * sizeof *dense);
}

static st_status small_bf16_fwd(const struct head_job *j, long b, long h, float *scratch)
{
    const long t = j->t, c = j->c, hs = j->hs;
    float *wide = wide_area(scratch, causal_small_scratch_bytes(t, hs)), *y32 = wide + 4 * t * hs;
    const float *q = bf16_values(wide, head_of(j, j->qkv, b, h), c, t, hs, 3);
    causal_small_forward(y32, hs, q, q + hs, q + 2 * hs, 3 * hs, t, hs, stats_of(j, b, h), scratch,
                         CAUSAL_SMALL_BF16);
    store(head_of(j, j->out, b, h), y32, c, t, hs, 1);
    return ST_OK;
}

static st_status small_bf16_bwd(const struct head_job *j, long b, long h, float *scratch)
{
    const long t = j->t, c = j->c, hs = j->hs;
    float *wide = wide_area(scratch, causal_small_scratch_bytes(t, hs)), *dq32 = wide + 4 * t * hs;
    const float *q = bf16_values(wide, head_of(j, j->qkv, b, h), c, t, hs, 3);
    const float *g = bf16_values(wide + 3 * t * hs, head_of(j, j->dy, b, h), c, t, hs, 1);
    causal_small_backward(dq32, dq32 + hs, dq32 + 2 * hs, 3 * hs, g, hs, q, q + hs, q + 2 * hs, 3 * hs, t, hs,
                          stats_of(j, b, h), scratch, CAUSAL_SMALL_BF16);
    store(head_of(j, j->out, b, h), dq32, c, t, hs, 3);
    return ST_OK;
}

static const struct attention_kernel {
    const char *name;  /* the layer's description */
    size_t (*scratch_bytes)(const struct xnode *x, long t, long hs);
    st_status (*forward)(const struct head_job *j, long b, long h, float *scratch);
    st_status (*backward)(const struct head_job *j, long b, long h, float *scratch);
    bool keeps_stats;  /* each head's softmax max and reciprocal, from forward to backward (seq.stats) */
} KERNELS[] = {
    [KERNEL_FP32] = {"causal fp32 tiles", fp32_scratch, fp32_fwd, fp32_bwd, false},
    [KERNEL_FP32_MATMUL] = {"causal fp32 oneDNN matmul in stripes", matmul_scratch, matmul_fwd, matmul_bwd, true},
    [KERNEL_FP32_SMALL] = {"causal fp32 short-context heads in AVX-512 registers", small_scratch, small_fwd,
                           small_bwd, true},
    [KERNEL_BF16_SMALL] = {"causal bf16 short-context heads in AVX-512 registers, fp32 products of bf16 values",
                           small_bf16_scratch, small_bf16_fwd, small_bf16_bwd, true},
    [KERNEL_DOT] = {"causal bf16 dot products in stripes", dot_scratch, dot_fwd, dot_bwd, false},
    [KERNEL_MATMUL] = {"causal bf16 oneDNN matmul in stripes", matmul_scratch, matmul_fwd, matmul_bwd, true},
};

/* A thread's share of the net's scratch, in floats: a whole number of
 * cache lines, so no two threads share one. */
static size_t thread_floats(const struct attention_kernel *k, const struct xnode *x)
{
    return (k->scratch_bytes(x, x->nd->t, x->nd->c / x->nd->heads) + 63) / 64 * 16;
}

/* A memory's rows (NULL: none), in its type. */
static dn_rows rows_in(dnnl_memory_t m, long ld)
{
    if (!m)
        return (dn_rows){NULL, ld, ST_DTYPE_F32};
    return (dn_rows){dn_mem_ptr(m), ld, dn_md_type(dn_mem_md(m)) == dnnl_bf16 ? ST_DTYPE_BF16 : ST_DTYPE_F32};
}

/* Every head of the layer; a failure on any thread is the pass's, with its message. */
static st_status run_heads(st_net *n, int j, bool backward)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const struct attention_kernel *k = &KERNELS[dn_state(x)->seq.att_kernel];
    const long c = nd->c;
    const struct head_job job = {x, nd->t, c, c / nd->heads, rows_in(dn_state(x)->seq.src, 3 * c),
                                 backward ? rows_in(dn_state(x)->diff.mem, c) : (dn_rows){0},
                                 backward ? rows_in(dn_state(x)->seq.target, 3 * c) : rows_in(dn_state(x)->dst.mem, c),
                                 dn_state(x)->seq.stats};
    if (!job.out.at)
        return ST_OK;
    const size_t per_thread = thread_floats(k, x);
    st_status failed = ST_OK;
    st_kept_error kept;
#pragma omp parallel for schedule(static)
    for (long bh = 0; bh < n->batch * nd->heads; bh++) {
        float *scratch = dn_net(n)->head_scratch + (size_t)omp_get_thread_num() * per_thread;
        const st_status s = (backward ? k->backward : k->forward)(&job, bh / nd->heads, bh % nd->heads, scratch);
        if (s != ST_OK)
#pragma omp critical(attention_failure)
            if (failed == ST_OK)
                st_error_keep(&kept), failed = s;
    }
    return failed == ST_OK ? ST_OK : st_error_again(&kept, failed);
}

static st_status att_fwd(st_net *n, int j) { return run_heads(n, j, false); }
static st_status att_bwd(st_net *n, int j) { return run_heads(n, j, true); }

/* Without AMX a bf16 head of up to this T runs faster as oneDNN's matmul
 * (AVX512-BF16's brgemm) than as the dot products: gpt's 256 x 64 head
 * 1.44-1.5x, its bf16 step 1.03-1.04x on a Zen 4 core (docs/benchmarks.md
 * 0zc); at T 1024 the dot products were 11-12% faster on a Xeon held to
 * AVX512-BF16 (0o) and level on the Zen 4, so gpt2's keep them. */
#define MATMUL_BF16_MAX_T_WITHOUT_AMX 256

/* Primitives for oneDNN's matmul: an fp32 attention's unless
 * SHMTRAIN_ATTENTION_TILES; a bf16 one's where oneDNN has AMX or the
 * head is short, or SHMTRAIN_ATTENTION_MATMUL asks, not under
 * SHMTRAIN_ATTENTION_DOT. */
static bool wants_matmul(const st_net *n, const struct xnode *x)
{
    const st_nn_tuning *t = &dn_net(n)->opt;
    if (!x->lowp)
        return !t->attention_tiles;
    return !t->attention_dot &&
           (t->attention_matmul || st_nn_amx_supported() || x->nd->t <= MATMUL_BF16_MAX_T_WITHOUT_AMX);
}

/* A bf16 net's heads up to this T x head size take the short-context
 * kernel: its fp32 multiply-adds beat the dot products' bf16 pairs and the
 * matmul while a head's fixed costs dominate (gpt-mini's 64 x 32: forward
 * 1.3-1.8x, backward 1.6-1.7x the dot products' speed on a Zen 4 core),
 * tie at 5120 (80 x 64, 160 x 32) and lose past it (gpt's 256 x 64: 0.78x
 * and 0.73x of the matmul's speed); docs/benchmarks.md 0zc. */
#define SMALL_BF16_MAX_AREA 4096

/* The short-context kernel on a head it fits (causal_small_fits: AVX-512,
 * head size 16 to 64, T up to 256): an fp32 net's attention (every edge
 * fp32), and a bf16 one's up to SMALL_BF16_MAX_AREA, unless
 * SHMTRAIN_ATTENTION_MATMUL asks for another, or _TILES in an fp32 net, or
 * _DOT in a bf16 one. */
static bool wants_small(const st_net *n, const struct xnode *x)
{
    const st_nn_tuning *t = &dn_net(n)->opt;
    const long hs = x->nd->c / x->nd->heads;
    if (t->attention_matmul || !causal_small_fits(x->nd->t, hs))
        return false;
    if (x->lowp)
        return !t->attention_dot && x->nd->t * hs <= SMALL_BF16_MAX_AREA;
    return n->cfg.precision == ST_DTYPE_F32 && !t->attention_tiles;
}

/* oneDNN's matmul where the net made its primitives (wants_matmul) and
 * they are not oneDNN's reference kernels (a CPU without native bf16,
 * under SHMTRAIN_BF16_ANY_ISA); else an fp32 attention's tiles (an fp32
 * net's, or where the CPU has no AVX512-BF16 (precision.c: the layer is
 * then fp32) or SHMTRAIN_ATTENTION_FP32 asks) and a bf16 one's dot
 * products; the short-context kernel before either where it is wanted. */
static int choose_kernel(const struct xnode *x, bool small)
{
    const bool matmul = dn_state(x)->seq.causal && !dn_causal_is_reference(dn_state(x)->seq.causal);
    if (small)
        return x->lowp ? KERNEL_BF16_SMALL : KERNEL_FP32_SMALL;
    if (!x->lowp)
        return matmul ? KERNEL_FP32_MATMUL : KERNEL_FP32;
    return matmul ? KERNEL_MATMUL : KERNEL_DOT;
}

/* The net's matmul primitives for this head shape and operand type: made
 * once, shared by every attention layer of the shape. */
static st_status net_causal(st_net *n, long t, long hs, bool f32, dn_causal **out)
{
    struct onednn_net *d = dn_net(n);
    for (int i = 0; i < d->ncausal; i++)
        if (dn_causal_fits(d->causal[i], t, hs, f32)) {
            *out = d->causal[i];
            return ST_OK;
        }
    dn_causal **grown = realloc(d->causal, (size_t)(d->ncausal + 1) * sizeof *grown);
    if (!grown)
        return st_fail(ST_ERR_NOMEM, "net: out of memory for attention's primitives");
    d->causal = grown;
    OK(dn_causal_create(&d->causal[d->ncausal], d->eng, t, hs, MATMUL_STRIPE_ROWS, omp_get_max_threads(), f32));
    *out = d->causal[d->ncausal++];
    return ST_OK;
}

void dn_attention_free(struct onednn_net *d)
{
    for (int i = 0; i < d->ncausal; i++)
        dn_causal_destroy(d->causal[i]);
    free(d->causal);
}

st_status dn_build_attention(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const long hs = nd->c / nd->heads;
    const bool small = wants_small(n, x);
    if (!small && wants_matmul(n, x))
        OK(net_causal(n, nd->t, hs, !x->lowp, &dn_state(x)->seq.causal));
    dn_state(x)->seq.att_kernel = choose_kernel(x, small);
    const int chosen = dn_state(x)->seq.att_kernel;
    const bool matmul = chosen == KERNEL_MATMUL || chosen == KERNEL_FP32_MATMUL;
    const struct attention_kernel *k = &KERNELS[chosen];
    if (k->keeps_stats &&
        !(dn_state(x)->seq.stats = calloc((size_t)(n->batch * nd->heads * 2 * nd->t), sizeof(float))))
        return st_fail(ST_ERR_NOMEM, "net: out of memory for attention's softmax statistics");
    const char *onednn = matmul ? dn_causal_impl(dn_state(x)->seq.causal) : NULL;
    snprintf(x->impl, sizeof x->impl, "%s%s%s per sample and head, C softmax, P computed again in backward",
             k->name, onednn ? " " : "", onednn ? onednn : "");
    OK(dn_reserve_shared(&dn_net(n)->head_scratch, &dn_net(n)->head_scratch_floats,
                         (size_t)omp_get_max_threads() * thread_floats(k, x), "attention's scratch"));
    OK(dn_seq_io_as_planned(n, j, att_bwd));
    return dn_add_step(n, &dn_state(x)->fwd, att_fwd, NODE_ATTENTION);
}
