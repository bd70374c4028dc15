/* The sequence layers on the oneDNN backend: token and position embeddings,
 * layer norm, linear layers and GELU, over plain
 * [rows, C] tensors (rows = samples x positions).
 *
 * Matrix products: the linear layers' through dnnl_sgemm (attention's are
 * onednn_attention.c's, the head's onednn_head.c's).  Layer norm, GELU
 * and the softmax are seq_kernels.c's C kernels (it says why not oneDNN's),
 * the embeddings C gathers.  Every sum over rows that becomes a parameter
 * gradient is reduced in a fixed order for a fixed thread count, so a run
 * repeats bitwise.  Tested against ref_seq.c (tests/test_gpt.c).
 */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>

#include "onednn_internal.h"
#include "kernels/seq_kernels.h"
#include "kernels/simd.h"
#include "kernels/transpose.h"

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
static st_status plain_rows_of(st_net *n, const struct node *nd, dnnl_data_type_t dt, const_dnnl_memory_desc_t *md)
{
    dnnl_dims_t d = {(dnnl_dim_t)nn_rows(n, nd), nd->c};
    return dn_md_tag(n, md, 2, d, dt, dnnl_ab);
}

static st_status plain_rows(st_net *n, const struct node *nd, const_dnnl_memory_desc_t *md)
{
    return plain_rows_of(n, nd, dnnl_f32, md);
}

/* Output plain rows of type `out_dt` and input rows of `in_dt` (the input
 * reordered if its producer chose otherwise); and, when the input wants a
 * gradient, where it goes (in `in_dt`), after step `bwd`. */
static st_status seq_io_types(st_net *n, int j, dnnl_data_type_t out_dt, dnnl_data_type_t in_dt,
                              st_status (*bwd)(st_net *, int))
{
    struct xnode *x = &n->x[j];
    const_dnnl_memory_desc_t out, in;
    OK(plain_rows_of(n, x->nd, out_dt, &out));
    OK(dn_set_dst(n, x, out));
    if (x->in < 0 || x->kind == NODE_EMBED)
        return bwd ? dn_add_step(n, &dn_state(x)->bwd, bwd, x->kind) : ST_OK;
    OK(plain_rows_of(n, n->x[x->in].nd, in_dt, &in));
    OK(dn_input_as(n, x, in, &dn_state(x)->seq.src));
    if (bwd)
        OK(dn_add_step(n, &dn_state(x)->bwd, bwd, x->kind));
    return dn_deliver(n, j, x->in, in, NULL, &dn_state(x)->seq.target);
}

static st_status seq_io_of(st_net *n, int j, dnnl_data_type_t dt, st_status (*bwd)(st_net *, int))
{
    return seq_io_types(n, j, dt, dt, bwd);
}

st_status dn_seq_io(st_net *n, int j, st_status (*bwd)(st_net *, int))
{
    return seq_io_of(n, j, dnnl_f32, bwd);
}

st_status dn_seq_io_as_planned(st_net *n, int j, st_status (*bwd)(st_net *, int))
{
    const struct xnode *x = &n->x[j];
    return seq_io_types(n, j, dn_type_of(x->stored), dn_type_of(x->compute), bwd);
}

void dn_seq_free(struct dn_seq_state *s)
{
    free(s->stats);
    free(s->partial);
    free(s->scratch);
    free(s->tanh_u);
}

/* ------------------------------------------------------- embeddings -- */

static st_status embed_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const int32_t *ids = dn_mem_ptr(dn_net(n)->input_user);
    const float *wte = n->params + nd->w_off, *wpe = n->params + nd->b_off;
    float *y = dn_mem_ptr(dn_state(x)->dst.mem);
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
    const int32_t *ids = dn_mem_ptr(dn_net(n)->input_user);
    const float *dy = dn_mem_ptr(dn_state(x)->diff.mem);
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
    OK(dn_seq_io(n, j, embed_bwd));
    return dn_add_step(n, &dn_state(x)->fwd, embed_fwd, NODE_EMBED);
}

/* ------------------------------------------------------- layer norm -- */

static st_status ln_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    seq_ln_fwd(dn_mem_ptr(dn_state(x)->dst.mem), dn_state(x)->seq.stats, dn_seq_src(x), n->params + nd->w_off,
               n->params + nd->b_off, (long)nn_rows(n, nd), nd->c);
    return ST_OK;
}

static st_status ln_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    seq_ln_bwd(dn_seq_target(x), n->grads + nd->w_off, n->grads + nd->b_off, dn_state(x)->seq.partial, dn_seq_src(x),
               dn_mem_ptr(dn_state(x)->diff.mem), n->params + nd->w_off, dn_state(x)->seq.stats, (long)nn_rows(n, nd), nd->c);
    return ST_OK;
}

/* Written in bf16 for bf16 consumers (lowp_writes): fp32 rows rounded once,
 * the bf16 gradient widened a row at a time. */
static st_status ln_fwd_bf16(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    seq_ln_fwd_bf16(dn_mem_ptr(dn_state(x)->dst.mem), dn_state(x)->seq.stats, dn_seq_src(x), n->params + nd->w_off,
                    n->params + nd->b_off, (long)nn_rows(n, nd), nd->c, dn_state(x)->seq.scratch);
    return ST_OK;
}

static st_status ln_bwd_bf16(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    seq_ln_bwd_bf16(dn_seq_target(x), n->grads + nd->w_off, n->grads + nd->b_off, dn_state(x)->seq.partial, dn_seq_src(x),
                    dn_mem_ptr(dn_state(x)->diff.mem), n->params + nd->w_off, dn_state(x)->seq.stats, (long)nn_rows(n, nd),
                    nd->c, dn_state(x)->seq.scratch);
    return ST_OK;
}

static st_status build_ln_c(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const size_t rows = nn_rows(n, x->nd);
    const bool bf16 = dn_output_lowp(n, j);
    snprintf(x->impl, sizeof x->impl, bf16 ? "C rows, written in bf16" : "C rows");
    struct dn_seq_state *s = &dn_state(x)->seq;
    s->stats = calloc(2 * rows, sizeof(float));
    s->partial = nn_lines_alloc(seq_ln_partial_floats(x->nd->c), sizeof(float), true);
    s->scratch = bf16 ? nn_lines_alloc((size_t)omp_get_max_threads() * (size_t)x->nd->c, sizeof(float), true) : NULL;
    if (!s->stats || !s->partial || (bf16 && !s->scratch))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    OK(seq_io_types(n, j, dn_type_of(x->stored), dnnl_f32, bf16 ? ln_bwd_bf16 : ln_bwd));
    return dn_add_step(n, &dn_state(x)->fwd, bf16 ? ln_fwd_bf16 : ln_fwd, NODE_LAYERNORM);
}

/* oneDNN 3's layer normalisation (its jit kernel came in 2.7), under
 * tuning.onednn_layernorm: faster alone (bench/st-op-candidates layernorm),
 * but inside the step the C rows win by a hair (st-step-ab; benchmarks.md,
 * section 0).  Kept: it takes bf16 data with fp32 statistics, the way to a
 * bf16 layer norm.  gamma and beta are the parameter buffer's, their
 * gradients written there. */
static st_status build_ln_onednn(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    dnnl_engine_t eng = dn_net(n)->eng;
    const unsigned flags = dnnl_use_scale | dnnl_use_shift;
    const dnnl_dims_t rows = {(dnnl_dim_t)nn_rows(n, nd)}, c = {nd->c};
    const_dnnl_memory_desc_t data, stat, vec;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t f, b;
    OK(plain_rows(n, nd, &data));
    OK(dn_md_tag(n, &stat, 1, rows, dnnl_f32, dnnl_a));
    OK(dn_plain_md(n, &vec, 1, c));
    OK(DN_PD(n, fpd, NULL,
             dnnl_layer_normalization_forward_primitive_desc_create(&fpd, eng, dnnl_forward_training, data, data,
                                                                    stat, 1e-5f, flags, NULL)));
    OK(DN_PD(n, bpd, NULL,
             dnnl_layer_normalization_backward_primitive_desc_create(&bpd, eng, dnnl_backward, data, data, data, stat,
                                                                     1e-5f, flags, fpd, NULL)));
    dn_impl_name(x, fpd);
    dn_impl_name(x, bpd);
    OK(dn_set_dst(n, x, data));
    OK(dn_input_as(n, x, data, &dn_state(x)->seq.src));
    dnnl_memory_t scale, shift, mean, var, dscale, dshift;
    OK(dn_mem_new(n, &scale, vec, n->params + nd->w_off));
    OK(dn_mem_new(n, &shift, vec, n->params + nd->b_off));
    OK(dn_mem_new(n, &dscale, vec, n->grads + nd->w_off));
    OK(dn_mem_new(n, &dshift, vec, n->grads + nd->b_off));
    OK(dn_mem_new(n, &mean, stat, NULL));
    OK(dn_mem_new(n, &var, stat, NULL));
    OK(dn_prim_new(n, &f, fpd));
    OK(dn_prim_new(n, &b, bpd));
    OK(dn_add_op(n, &dn_state(x)->fwd, f, NODE_LAYERNORM, DNNL_ARG_SRC, dn_state(x)->seq.src, DNNL_ARG_DST, dn_state(x)->dst.mem,
                 DNNL_ARG_MEAN, mean, DNNL_ARG_VARIANCE, var, DNNL_ARG_SCALE, scale, DNNL_ARG_SHIFT, shift, -1));
    /* SHIFT too: oneDNN 3's backward wants it here (unlike batch norm's) */
    return dn_add_bwd_op(n, j, b, data, NULL, DNNL_ARG_SRC, dn_state(x)->seq.src, DNNL_ARG_MEAN, mean,
                         DNNL_ARG_VARIANCE, var, DNNL_ARG_DIFF_DST, dn_state(x)->diff.mem, DNNL_ARG_SCALE, scale,
                         DNNL_ARG_SHIFT, shift, DNNL_ARG_DIFF_SCALE, dscale, DNNL_ARG_DIFF_SHIFT, dshift, -1);
}

st_status dn_build_ln(st_net *n, int j)
{
    return dn_net(n)->opt.onednn_layernorm ? build_ln_onednn(n, j) : build_ln_c(n, j);
}

/* ------------------------------------------------------------- GELU -- */

/* GELU, tanh form, in C (seq_kernels.c says why). */

static st_status gelu_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    seq_gelu_fwd(dn_mem_ptr(dn_state(x)->dst.mem), dn_state(x)->seq.tanh_u, dn_seq_src(x), (long)nn_node_size(n, x->nd));
    return ST_OK;
}

static st_status gelu_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    float *dx = dn_seq_target(x);
    if (dx)
        seq_gelu_bwd(dx, dn_mem_ptr(dn_state(x)->diff.mem), dn_seq_src(x), dn_state(x)->seq.tanh_u, (long)nn_node_size(n, x->nd));
    return ST_OK;
}

/* The same in bf16 (a bf16 net's linear layers on both sides): bf16 in and
 * out, computed in fp32, each result rounded once; neither edge converts.
 * (oneDNN's bf16 GELU took 1.5x the fp32 C kernel's time in gpt-mini's step.) */
static st_status gelu_fwd_bf16(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    seq_gelu_fwd_bf16(dn_mem_ptr(dn_state(x)->dst.mem), dn_state(x)->seq.tanh_u, dn_mem_ptr(dn_state(x)->seq.src),
                      (long)nn_node_size(n, x->nd));
    return ST_OK;
}

static st_status gelu_bwd_bf16(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    st_bf16 *dx = dn_state(x)->seq.target ? dn_mem_ptr(dn_state(x)->seq.target) : NULL;
    if (dx)
        seq_gelu_bwd_bf16(dx, dn_mem_ptr(dn_state(x)->diff.mem), dn_mem_ptr(dn_state(x)->seq.src), dn_state(x)->seq.tanh_u,
                          (long)nn_node_size(n, x->nd));
    return ST_OK;
}

st_status dn_build_gelu(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const bool bf16 = dn_output_lowp(n, j);
    snprintf(x->impl, sizeof x->impl, bf16 ? "C, vectorised tanh, bf16 in and out" : "C, vectorised tanh");
    if (!(dn_state(x)->seq.tanh_u = nn_lines_alloc(nn_node_size(n, x->nd), sizeof(float), false)))
        return st_fail(ST_ERR_NOMEM, "net: out of memory for GELU");
    OK(seq_io_of(n, j, dn_type_of(x->stored), bf16 ? gelu_bwd_bf16 : gelu_bwd));
    return dn_add_step(n, &dn_state(x)->fwd, bf16 ? gelu_fwd_bf16 : gelu_fwd, NODE_GELU);
}

/* ------------------------------------------------ linear on [T, C] -- */

/* A linear layer on a sequence's rows (in fp32) goes straight to dnnl_sgemm,
 * as the head does, rather than through oneDNN 2.6's gemm inner product
 * around the same sgemm: on gpt-mini's shapes that wrapper scaled 1.64x
 * from 1 to 2 threads where the bare calls scale 1.7-1.85x, and its bias
 * gradient is an SSE loop (docs/benchmarks-history.md, section 2).  Weights
 * are the parameter buffer's [out, in]. */
bool dn_seq_linear_fits(const st_net *n, const struct xnode *x)
{
    return x->kind == NODE_LINEAR && x->nd->t > 0 && n->x[x->in].nd->t > 0 && !x->lowp && !x->fuse_relu;
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
    float *y = dn_mem_ptr(dn_state(x)->dst.mem);
    if (nd->bias) {  /* the bias rows first, the product added to them: no second pass over y */
        const float *b = n->params + nd->b_off;
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++)
            memcpy(y + r * out, b, (size_t)out * sizeof(float));
    }
    return sgemm('N', 'T', rows, out, in, 1.0f, dn_seq_src(x), in, n->params + nd->w_off, in, nd->bias ? 1.0f : 0.0f,
                 y, out);
}

/* The weight gradient dW = dY^T X as dnnl_sgemm's "TN" reads its operands
 * down their columns, and on gpt-mini's shapes ran well below the same
 * product from both operands transposed ("NT"; docs/benchmarks-history.md,
 * section 11, session 10); the two transposes cost less than that
 * difference while they stay in cache.  On gpt's (3072 rows, 22 MB of
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
    float *dyt = dn_net(n)->transposed, *xt = dyt + out * rows;
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
    const float *dy = dn_mem_ptr(dn_state(x)->diff.mem), *w = n->params + nd->w_off;
    float *dx = dn_seq_target(x);
    const enum dn_wgrad_form form = dn_wgrad_form(rows, in, out, dn_net(n)->opt.seq_tn);
    if (form != DN_WGRAD_TN)
        OK(wgrad_from_transposed(n, form, dy, dn_seq_src(x), rows, in, out, n->grads + nd->w_off,
                                 nd->bias ? n->grads + nd->b_off : NULL));
    else
        OK(sgemm('T', 'N', out, in, rows, 1.0f, dy, out, dn_seq_src(x), in, 0.0f, n->grads + nd->w_off, in));
    if (nd->bias && form == DN_WGRAD_TN) {
        float *db = n->grads + nd->b_off;
#pragma omp parallel for schedule(static)
        for (long c = 0; c < out; c += COLUMN_BLOCK)
            column_sums(db, dy, rows, out, c, out - c < COLUMN_BLOCK ? out : c + COLUMN_BLOCK);
    }
    return dx ? sgemm('N', 'N', rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in) : ST_OK;
}

st_status dn_build_seq_linear(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const long rows = (long)nn_rows(n, x->nd), out = x->nd->c, in = n->x[x->in].nd->c;
    const enum dn_wgrad_form form = dn_wgrad_form(rows, in, out, dn_net(n)->opt.seq_tn);
    if (form != DN_WGRAD_TN)  /* dY transposed, and X if it is too */
        OK(dn_reserve_shared(&dn_net(n)->transposed, &dn_net(n)->transposed_floats,
                          (size_t)(rows * (out + (form == DN_WGRAD_NT ? in : 0))), "the linear layers' transposes"));
    static const char *const dw_from[] = {[DN_WGRAD_TN] = "dY^T X", [DN_WGRAD_NN] = "dY^T, X transposed",
                                          [DN_WGRAD_NT] = "dY^T and X^T"};
    snprintf(x->impl, sizeof x->impl, "sgemm, dW from %s", dw_from[form]);
    OK(dn_seq_io(n, j, seq_linear_bwd));
    return dn_add_step(n, &dn_state(x)->fwd, seq_linear_fwd, NODE_LINEAR);
}
