/* The sequence layers on the oneDNN backend: token and position embeddings,
 * layer norm, causal attention, GELU and the tied head, over plain
 * [rows, C] tensors (rows = samples x positions).
 *
 * Matrix products: the linear layers' and the head's through dnnl_sgemm,
 * attention's per sample and head through causal.c's kernels, which skip
 * what the causal mask discards (half of each product).  Layer norm, GELU,
 * the softmax and the embeddings are C loops, OpenMP-parallel and
 * vectorised: oneDNN 2.6.3's layer norm is a generic C++ kernel (its jit
 * one came in 2.7), its AVX2 GELU ran at 5 ns an element here (this one at
 * 1.6), and the embeddings are gathers.  Every sum over rows that becomes a parameter
 * gradient is reduced in a fixed order for a fixed thread count, so a run
 * repeats bitwise.  Tested against ref_seq.c (tests/test_gpt.c).
 */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>

#include "causal.h"
#include "onednn_internal.h"
#include "simd.h"
#include "transpose.h"

/* The `omp simd` reductions below sum in vector lanes: a fixed order for a
 * given build and CPU, so runs repeat bitwise; within fp32 round-off of the
 * reference's double sums (test_gpt's tolerance). */

static st_status sgemm(char ta, char tb, dnnl_dim_t m, dnnl_dim_t nn, dnnl_dim_t k, float alpha, const float *a,
                       dnnl_dim_t lda, const float *b, dnnl_dim_t ldb, float beta, float *c, dnnl_dim_t ldc)
{
    dnnl_status_t s = dnnl_sgemm(ta, tb, m, nn, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return s == dnnl_success ? ST_OK : st_fail(ST_ERR_BACKEND, "oneDNN: dnnl_sgemm failed (status %d)", (int)s);
}

/* The plain [rows, c] layout every layer here reads and writes. */
static st_status plain_rows(st_net *n, const struct node *nd, const_dnnl_memory_desc_t *md)
{
    dnnl_dims_t d = {(dnnl_dim_t)nn_rows(n, nd), nd->c};
    return dn_plain_md(n, md, 2, d);
}

/* Output plain; input plain (reordered if its producer chose otherwise);
 * and, when the input wants a gradient, where it goes, after step `bwd`. */
static st_status seq_io(st_net *n, int j, st_status (*bwd)(st_net *, int))
{
    struct xnode *x = &n->x[j];
    const_dnnl_memory_desc_t out, in;
    OK(plain_rows(n, x->nd, &out));
    OK(dn_set_dst(n, x, out));
    if (x->in < 0 || x->kind == NODE_EMBED)
        return bwd ? dn_add_step(n, &x->dn->bwd, bwd, x->kind) : ST_OK;
    OK(plain_rows(n, n->x[x->in].nd, &in));
    OK(dn_input_as(n, x, in, &x->dn->seq.src));
    if (bwd)
        OK(dn_add_step(n, &x->dn->bwd, bwd, x->kind));
    return dn_deliver(n, j, x->in, in, NULL, &x->dn->seq.target);
}

static float *src_of(const struct xnode *x) { return dn_mem_ptr(x->dn->seq.src); }
static float *target_of(const struct xnode *x) { return x->dn->seq.target ? dn_mem_ptr(x->dn->seq.target) : NULL; }

void dn_seq_free(struct dn_seq_state *s)
{
    free(s->stats);
    free(s->partial);
    free(s->att);
    free(s->scratch);
    free(s->tanh_u);
}

/* ------------------------------------------------------- embeddings -- */

static st_status embed_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const int32_t *ids = dn_mem_ptr(n->dnet->input_user);
    const float *wte = n->params + nd->w_off, *wpe = n->params + nd->b_off;
    float *y = dn_mem_ptr(x->dn->dst.mem);
    const long rows = (long)nn_rows(n, nd), c = nd->c, t = nd->t;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const float *e = wte + ids[r] * c, *p = wpe + (r % t) * c;
        float *o = y + r * c;
        for (long i = 0; i < c; i++)
            o[i] = e[i] + p[i];
    }
    return ST_OK;
}

static st_status embed_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const int32_t *ids = dn_mem_ptr(n->dnet->input_user);
    const float *dy = dn_mem_ptr(x->dn->diff.mem);
    float *dwte = n->grads + nd->w_off, *dwpe = n->grads + nd->b_off;
    const long c = nd->c, t = nd->t, samples = n->batch;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < t; p++) {  /* each position's sum over samples, in sample order */
        float *d = dwpe + p * c;
        memcpy(d, dy + p * c, (size_t)c * sizeof(float));
        for (long b = 1; b < samples; b++)
            for (long i = 0; i < c; i++)
                d[i] += dy[(b * t + p) * c + i];
    }
    if (!nd->tied)  /* else the head wrote it, and this adds */
        memset(dwte, 0, nd->w_count * sizeof(float));
    for (long r = 0; r < samples * t; r++) {  /* a scatter: rows sharing a token would race */
        float *e = dwte + ids[r] * c;
        for (long i = 0; i < c; i++)
            e[i] += dy[r * c + i];
    }
    return ST_OK;
}

st_status dn_build_embed(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    snprintf(x->impl, sizeof x->impl, "C gather");
    OK(seq_io(n, j, embed_bwd));
    return dn_add_step(n, &x->dn->fwd, embed_fwd, NODE_EMBED);
}

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

static st_status ln_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const float *src = src_of(x), *g = n->params + nd->w_off, *b = n->params + nd->b_off;
    float *y = dn_mem_ptr(x->dn->dst.mem), *stats = x->dn->seq.stats;
    const long rows = (long)nn_rows(n, nd), c = nd->c;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++)
        ln_row_fwd(y + r * c, src + r * c, g, b, c, stats + 2 * r);
    return ST_OK;
}

static st_status ln_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const float *src = src_of(x), *dy = dn_mem_ptr(x->dn->diff.mem), *g = n->params + nd->w_off;
    const float *stats = x->dn->seq.stats;
    float *dx = target_of(x), *partial = x->dn->seq.partial;
    const long rows = (long)nn_rows(n, nd), c = nd->c;
    const int threads = omp_get_max_threads();
#pragma omp parallel num_threads(threads)
    {
        const int me = omp_get_thread_num(), nt = omp_get_num_threads();
        float *pg = partial + (size_t)me * 2 * c, *pb = pg + c;
        memset(pg, 0, 2 * (size_t)c * sizeof(float));
        const long first = rows * me / nt, last = rows * (me + 1) / nt;
        for (long r = first; r < last; r++)
            ln_row_bwd(dx ? dx + r * c : NULL, pg, pb, src + r * c, dy + r * c, g, c, stats[2 * r],
                       stats[2 * r + 1]);
#pragma omp barrier
#pragma omp for schedule(static)
        for (long i = 0; i < 2 * c; i++) {  /* the partials summed in thread order */
            float s = 0;
            for (int k = 0; k < nt; k++)
                s += partial[(size_t)k * 2 * c + i];
            n->grads[(i < c ? nd->w_off : nd->b_off - c) + i] = s;
        }
    }
    return ST_OK;
}

st_status dn_build_ln(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const size_t rows = nn_rows(n, x->nd);
    snprintf(x->impl, sizeof x->impl, "C rows (oneDNN 2.6's is generic C++)");
    struct dn_seq_state *s = &x->dn->seq;
    s->stats = calloc(2 * rows, sizeof(float));
    s->partial = calloc((size_t)omp_get_max_threads() * 2 * x->nd->c, sizeof(float));
    if (!s->stats || !s->partial)
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    OK(seq_io(n, j, ln_bwd));
    return dn_add_step(n, &x->dn->fwd, ln_fwd, NODE_LAYERNORM);
}

/* -------------------------------------------------------- attention -- */

/* One head's scratch per thread: K or V transposed for causal_scores, then
 * (backward) dS. */
static float *head_scratch(const struct xnode *x, long t, long hs)
{
    return x->dn->seq.scratch + (size_t)omp_get_thread_num() * (size_t)(t * t + t * hs);
}

/* The softmax's row loops live in functions of their own so that they get
 * the AVX2 and AVX-512 clones: inside att_fwd / att_bwd they were built for
 * the baseline (SSE2) and took 2-3% of gpt-mini's step. */

/* Each row i of the t x t scores replaced by softmax over columns 0..i,
 * zeros right of the diagonal. */
ST_MULTIVERSION static void causal_softmax(float *p, long t)
{
    for (long i = 0; i < t; i++) {
        float *pr = p + i * t, mx = pr[0], sum = 0;
#pragma omp simd reduction(max : mx)
        for (long k = 1; k <= i; k++)
            mx = pr[k] > mx ? pr[k] : mx;
#pragma omp simd reduction(+ : sum)
        for (long k = 0; k <= i; k++)
            sum += (pr[k] = nn_expf(pr[k] - mx));
#pragma omp simd
        for (long k = 0; k < t; k++)
            pr[k] = k <= i ? pr[k] / sum : 0.0f;
    }
}

/* dS = P (dP - rowsum(P dP)) scale, in place of dP, zeros right of the
 * diagonal. */
ST_MULTIVERSION static void causal_softmax_bwd(float *ds, const float *p, long t, float scale)
{
    for (long i = 0; i < t; i++) {
        const float *pr = p + i * t;
        float *dr = ds + i * t, inner = 0;
#pragma omp simd reduction(+ : inner)
        for (long k = 0; k <= i; k++)
            inner += pr[k] * dr[k];
#pragma omp simd
        for (long k = 0; k < t; k++)
            dr[k] = k <= i ? pr[k] * (dr[k] - inner) * scale : 0.0f;
    }
}

/* One sample's one head: P = causal softmax(Q K^T / sqrt(hs)), Y = P V. */
static st_status att_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const long t = nd->t, c = nd->c, heads = nd->heads, hs = c / heads, row = 3 * c;
    const float *qkv = src_of(x), scale = 1.0f / sqrtf((float)hs);
    float *y = dn_mem_ptr(x->dn->dst.mem), *att = x->dn->seq.att;
#pragma omp parallel for schedule(static)
    for (long bh = 0; bh < n->batch * heads; bh++) {
        const long b = bh / heads, h = bh % heads;
        const float *q = qkv + b * t * row + h * hs;
        float *p = att + bh * t * t;
        causal_scores(p, t, hs, scale, q, row, q + c, row, head_scratch(x, t, hs));
        causal_softmax(p, t);
        causal_mix(y + b * t * c + h * hs, c, p, t, hs, q + 2 * c, row);
    }
    return ST_OK;
}

/* dP = dY V^T; dS = P (dP - rowsum(P dP)) / sqrt(hs); dQ = dS K, dK = dS^T Q,
 * dV = P^T dY, each head writing its own columns of dqkv. */
static st_status att_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const long t = nd->t, c = nd->c, heads = nd->heads, hs = c / heads, row = 3 * c;
    const float *qkv = src_of(x), *dy = dn_mem_ptr(x->dn->diff.mem), *att = x->dn->seq.att;
    const float scale = 1.0f / sqrtf((float)hs);
    float *dqkv = target_of(x);
    if (!dqkv)
        return ST_OK;
#pragma omp parallel for schedule(static)
    for (long bh = 0; bh < n->batch * heads; bh++) {
        const long b = bh / heads, h = bh % heads;
        const float *q = qkv + b * t * row + h * hs, *p = att + bh * t * t, *g = dy + b * t * c + h * hs;
        float *scratch = head_scratch(x, t, hs), *ds = scratch + t * hs, *dq = dqkv + b * t * row + h * hs;
        causal_scores(ds, t, hs, 1.0f, g, c, q + 2 * c, row, scratch);
        causal_softmax_bwd(ds, p, t, scale);
        causal_mix(dq, row, ds, t, hs, q + c, row);
        causal_mix_t(dq + c, row, ds, t, hs, q, row);
        causal_mix_t(dq + 2 * c, row, p, t, hs, g, c);
    }
    return ST_OK;
}

st_status dn_build_attention(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const size_t tt = (size_t)nd->t * nd->t;
    snprintf(x->impl, sizeof x->impl, "causal tiles per sample and head, C softmax");
    x->dn->seq.att = calloc((size_t)n->batch * nd->heads * tt, sizeof(float));
    const size_t per_thread = tt + (size_t)nd->t * (nd->c / nd->heads);  /* dS, and K or V transposed */
    x->dn->seq.scratch = calloc((size_t)omp_get_max_threads() * per_thread, sizeof(float));
    if (!x->dn->seq.att || !x->dn->seq.scratch)
        return st_fail(ST_ERR_NOMEM, "net: out of memory for attention weights");
    OK(seq_io(n, j, att_bwd));
    return dn_add_step(n, &x->dn->fwd, att_fwd, NODE_ATTENTION);
}

/* ------------------------------------------------------------- GELU -- */

/* GELU, tanh form, in C: oneDNN 2.6's AVX2 eltwise took 2.1 ms each way on
 * gpt-mini's 768 x 512 activation here (18% of the step); this takes about
 * 0.6 ms (6%). */
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

/* Split in cache-sized pieces over the threads. */
#define GELU_PIECE 4096L

static st_status gelu_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const float *src = src_of(x);
    float *y = dn_mem_ptr(x->dn->dst.mem);
    const long count = (long)nn_node_size(n, x->nd), pieces = (count + GELU_PIECE - 1) / GELU_PIECE;
#pragma omp parallel for schedule(static)
    for (long k = 0; k < pieces; k++) {
        const long at = k * GELU_PIECE;
        gelu_rows(y + at, x->dn->seq.tanh_u + at, src + at, count - at < GELU_PIECE ? count - at : GELU_PIECE);
    }
    return ST_OK;
}

static st_status gelu_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const float *src = src_of(x), *dy = dn_mem_ptr(x->dn->diff.mem);
    float *dx = target_of(x);
    const long count = (long)nn_node_size(n, x->nd), pieces = (count + GELU_PIECE - 1) / GELU_PIECE;
    if (!dx)
        return ST_OK;
#pragma omp parallel for schedule(static)
    for (long k = 0; k < pieces; k++) {
        const long at = k * GELU_PIECE;
        gelu_rows_bwd(dx + at, dy + at, src + at, x->dn->seq.tanh_u + at,
                      count - at < GELU_PIECE ? count - at : GELU_PIECE);
    }
    return ST_OK;
}

st_status dn_build_gelu(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    snprintf(x->impl, sizeof x->impl, "C, vectorised tanh");
    if (!(x->dn->seq.tanh_u = malloc(nn_node_size(n, x->nd) * sizeof(float))))
        return st_fail(ST_ERR_NOMEM, "net: out of memory for GELU");
    OK(seq_io(n, j, gelu_bwd));
    return dn_add_step(n, &x->dn->fwd, gelu_fwd, NODE_GELU);
}

/* ------------------------------------------------ linear on [T, C] -- */

/* A linear layer on a sequence's rows (in fp32) goes straight to dnnl_sgemm,
 * as the head does, rather than through oneDNN 2.6's gemm inner product
 * around the same sgemm: on gpt-mini's shapes that wrapper scaled 1.64x
 * from 1 to 2 threads where the bare calls scale 1.7-1.85x, and its bias
 * gradient is an SSE loop (gpt-mini's step 2-3% faster at 2 threads, level
 * at 1; gpt level).  Weights are the parameter buffer's [out, in].
 * SHMTRAIN_ONEDNN_SEQ_IP=1 keeps the inner product, for comparison. */
bool dn_seq_linear_fits(const st_net *n, const struct xnode *x)
{
    return x->kind == NODE_LINEAR && x->nd->t > 0 && n->x[x->in].nd->t > 0 && !x->dn->bf16 && !x->fuse_relu &&
           !n->dnet->opt.seq_ip;
}

/* sum[c] = sum over rows of m[r][c], rows in order (the same bits at any
 * thread count: the threads split the columns). */
ST_MULTIVERSION static void column_sums(float *restrict sum, const float *restrict m, long rows, long cols,
                                        long first, long last)
{
#pragma omp simd
    for (long c = first; c < last; c++)
        sum[c] = m[c];
    for (long r = 1; r < rows; r++) {
        const float *restrict row = m + r * cols;
#pragma omp simd
        for (long c = first; c < last; c++)
            sum[c] += row[c];
    }
}

#define COLUMN_BLOCK 32L /* bias gradient columns a thread takes at a time */

static st_status seq_linear_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const long rows = (long)nn_rows(n, nd), out = nd->c, in = n->x[x->in].nd->c;
    float *y = dn_mem_ptr(x->dn->dst.mem);
    if (nd->bias) {  /* the bias rows first, the product added to them: no second pass over y */
        const float *b = n->params + nd->b_off;
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++)
            memcpy(y + r * out, b, (size_t)out * sizeof(float));
    }
    return sgemm('N', 'T', rows, out, in, 1.0f, src_of(x), in, n->params + nd->w_off, in, nd->bias ? 1.0f : 0.0f,
                 y, out);
}

/* The weight gradient dW = dY^T X as dnnl_sgemm's "TN" reads its operands
 * down their columns, and on gpt-mini's shapes (768 rows, 128-512 wide) ran
 * at 44-58 GFLOP/s where the same product from both operands transposed
 * ("NT") ran at 72-77 on one thread; the two transposes cost less than
 * that difference while they stay in cache.  On gpt's (3072 rows, 22 MB of
 * operands) they cost more than "TN" loses there, hence the bound
 * (DN_WGRAD_TRANSPOSED_MAX_FLOATS, onednn_internal.h). */

/* dW = (dY^T) (X^T)^T or (dY^T) X, from dY (and X) transposed into the
 * net's scratch; db (if wanted) summed while dY passes (the same bits as
 * column_sums).  X is left as it is where it is no wider than dY: "NN" on
 * it ran gpt-mini's 384x128, 128x128 and 512x128 as fast as "NT" on X
 * transposed (and spares the transpose), but its 128x512 at 1.4x the time. */
static st_status wgrad_from_transposed(st_net *n, enum dn_wgrad_form form, const float *dy, const float *src,
                                       long rows, long in, long out, float *dw, float *db)
{
    float *dyt = n->dnet->transposed, *xt = dyt + out * rows;
#pragma omp parallel for schedule(static)
    for (long c = 0; c < out; c += COLUMN_BLOCK)
        nn_transpose(dyt + c * rows, rows, dy + c, out, rows, out - c < COLUMN_BLOCK ? out - c : COLUMN_BLOCK,
                     db ? db + c : NULL);
    if (form == DN_WGRAD_NN)
        return sgemm('N', 'N', out, in, rows, 1.0f, dyt, rows, src, in, 0.0f, dw, in);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < in; c += COLUMN_BLOCK)
        nn_transpose(xt + c * rows, rows, src + c, in, rows, in - c < COLUMN_BLOCK ? in - c : COLUMN_BLOCK, NULL);
    return sgemm('N', 'T', out, in, rows, 1.0f, dyt, rows, xt, rows, 0.0f, dw, in);
}

/* dW = dY^T X, db = dY's column sums, dX = dY W. */
static st_status seq_linear_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const long rows = (long)nn_rows(n, nd), out = nd->c, in = n->x[x->in].nd->c;
    const float *dy = dn_mem_ptr(x->dn->diff.mem), *w = n->params + nd->w_off;
    float *dx = target_of(x);
    const enum dn_wgrad_form form = dn_wgrad_form(rows, in, out, n->dnet->opt.seq_tn);
    if (form != DN_WGRAD_TN)
        OK(wgrad_from_transposed(n, form, dy, src_of(x), rows, in, out, n->grads + nd->w_off,
                                 nd->bias ? n->grads + nd->b_off : NULL));
    else
        OK(sgemm('T', 'N', out, in, rows, 1.0f, dy, out, src_of(x), in, 0.0f, n->grads + nd->w_off, in));
    if (nd->bias && form == DN_WGRAD_TN) {
        float *db = n->grads + nd->b_off;
#pragma omp parallel for schedule(static)
        for (long c = 0; c < out; c += COLUMN_BLOCK)
            column_sums(db, dy, rows, out, c, out - c < COLUMN_BLOCK ? out : c + COLUMN_BLOCK);
    }
    return dx ? sgemm('N', 'N', rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in) : ST_OK;
}

/* The net's one transposition scratch, grown to the largest layer's need. */
static st_status reserve_transposed(st_net *n, size_t floats)
{
    struct onednn_net *d = n->dnet;
    if (floats <= d->transposed_floats)
        return ST_OK;
    float *grown = realloc(d->transposed, floats * sizeof(float));
    if (!grown)
        return st_fail(ST_ERR_NOMEM, "net: out of memory for the linear layers' transposes");
    d->transposed = grown, d->transposed_floats = floats;
    return ST_OK;
}

st_status dn_build_seq_linear(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const long rows = (long)nn_rows(n, x->nd), out = x->nd->c, in = n->x[x->in].nd->c;
    const enum dn_wgrad_form form = dn_wgrad_form(rows, in, out, n->dnet->opt.seq_tn);
    if (form != DN_WGRAD_TN)  /* dY transposed, and X if it is too */
        OK(reserve_transposed(n, (size_t)(rows * (out + (form == DN_WGRAD_NT ? in : 0)))));
    snprintf(x->impl, sizeof x->impl, "sgemm");
    OK(seq_io(n, j, seq_linear_bwd));
    return dn_add_step(n, &x->dn->fwd, seq_linear_fwd, NODE_LINEAR);
}

/* ------------------------------------------------------ tied head -- */

/* logits = x E^T, E the embed's [vocab, c] token table. */
static st_status head_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *e = &n->model->nodes[x->nd->embed];
    return sgemm('N', 'T', (dnnl_dim_t)nn_rows(n, x->nd), e->vocab, e->c, 1.0f, src_of(x), e->c,
                 n->params + e->w_off, e->c, 0.0f, dn_mem_ptr(x->dn->dst.mem), e->vocab);
}

/* dx = dlogits E; dE = dlogits^T x, written here (the embed adds later). */
static st_status head_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *e = &n->model->nodes[x->nd->embed];
    const dnnl_dim_t rows = (dnnl_dim_t)nn_rows(n, x->nd);
    const float *dy = dn_mem_ptr(x->dn->diff.mem);
    float *dx = target_of(x);
    if (dx)
        OK(sgemm('N', 'N', rows, e->c, e->vocab, 1.0f, dy, e->vocab, n->params + e->w_off, e->c, 0.0f, dx, e->c));
    return sgemm('T', 'N', e->vocab, e->c, rows, 1.0f, dy, e->vocab, src_of(x), e->c, 0.0f, n->grads + e->w_off,
                 e->c);
}

st_status dn_build_head(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    snprintf(x->impl, sizeof x->impl, "sgemm through the embed's table");
    OK(seq_io(n, j, head_bwd));
    return dn_add_step(n, &x->dn->fwd, head_fwd, NODE_HEAD);
}
