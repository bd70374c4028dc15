/* The small layers on oneDNN: input, ReLU, batch norm, dropout, flatten, add. */
#define _GNU_SOURCE
#include "onednn_internal.h"

/* A ReLU whose only input is a C max-pool (the pool/ReLU swap makes that
 * the usual case) runs inside the pool: max(window, 0) forward, and the
 * pool's backward, which reads the ReLU's gradient, passes nothing back to a
 * window it clipped.  That saves a pass over the pooled tensor each way. */
static bool relu_fits_pool(const st_net *n, const struct xnode *x)
{
    const struct xnode *px = &n->x[x->in];
    return px->kind == NODE_MAXPOOL && dn_state(px)->pool.arg && px->consumers == 1;
}

static st_status build_relu_in_pool(st_net *n, struct xnode *x)
{
    struct xnode *px = &n->x[x->in];
    OK(dn_set_dst(n, x, dn_state(px)->dst.md));  /* the gradient memories; dst is then the pool's own */
    dn_state(x)->dst.mem = dn_state(px)->dst.mem;
    dn_state(px)->pool.relu = true;
    dn_state(px)->pool.diff = dn_state(x)->diff.mem;
    snprintf(x->impl, sizeof x->impl, "in the max-pool before it");
    return ST_OK;
}

st_status dn_build_relu(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    if (relu_fits_pool(n, x))
        return build_relu_in_pool(n, x);
    return dn_build_eltwise(n, j, dnnl_eltwise_relu);
}

st_status dn_build_eltwise(st_net *n, int j, dnnl_alg_kind_t alg)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const_dnnl_memory_desc_t in = dn_state(px)->dst.md;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t f, b;
    OK(DN_PD(n, fpd, NULL,
             dnnl_eltwise_forward_primitive_desc_create(&fpd, dn_net(n)->eng, dnnl_forward_training, alg, in, in, 0, 0,
                                                        NULL)));
    dn_impl_name(x, fpd);
    OK(dn_set_dst(n, x, dn_query(fpd, dnnl_query_dst_md, 0)));
    OK(dn_prim_new(n, &f, fpd));
    OK(dn_add_op(n, &dn_state(x)->fwd, f, x->kind, DNNL_ARG_SRC, dn_state(px)->dst.mem, DNNL_ARG_DST, dn_state(x)->dst.mem, -1));
    if (!px->wants_diff)
        return ST_OK;
    OK(DN_PD(n, bpd, NULL,
             dnnl_eltwise_backward_primitive_desc_create(&bpd, dn_net(n)->eng, alg, in, in, in, 0, 0, fpd, NULL)));
    OK(dn_prim_new(n, &b, bpd));
    return dn_add_bwd_op(n, j, b, dn_query(bpd, dnnl_query_diff_src_md, 0), NULL, DNNL_ARG_SRC, dn_state(px)->dst.mem,
                         DNNL_ARG_DIFF_DST, dn_state(x)->diff.mem, -1);
}

static st_status bn_running_stats(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const float *mean = dn_mem_ptr(dn_state(x)->bn.mean), *var = dn_mem_ptr(dn_state(x)->bn.var);
    const double m = (double)n->batch * nd->h * nd->w;
    float *rm = n->buffers + nd->buf_off, *rv = rm + nd->c;
    for (int c = 0; c < nd->c; c++) {
        rm[c] = 0.9f * rm[c] + 0.1f * mean[c];
        rv[c] = 0.9f * rv[c] + 0.1f * (float)(var[c] * (m > 1 ? m / (m - 1) : 1.0));
    }
    return ST_OK;
}

st_status dn_build_bn(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const struct node *nd = x->nd;
    /* A ReLU after it runs inside (its gradient's mask, a bit an element,
     * in the workspace): resnet's ReLUs read and wrote their tensors once
     * more each pass, 9% of its step (st-roofline, docs/benchmarks.md). */
    const unsigned flags = dnnl_use_scale | dnnl_use_shift | (x->fuse_relu ? dnnl_fuse_norm_relu : 0);
    const_dnnl_memory_desc_t in = dn_state(px)->dst.md;
    dnnl_engine_t eng = dn_net(n)->eng;
    dnnl_primitive_desc_t tpd, ipd, bpd;
    dnnl_primitive_t tp, ip, bp;
    OK(DN_PD(n, tpd, NULL,
             dnnl_batch_normalization_forward_primitive_desc_create(&tpd, eng, dnnl_forward_training, in, in, 1e-5f,
                                                                    flags, NULL)));
    OK(DN_PD(n, ipd, NULL,
             dnnl_batch_normalization_forward_primitive_desc_create(&ipd, eng, dnnl_forward_inference, in, in, 1e-5f,
                                                                    flags | dnnl_use_global_stats, NULL)));
    dn_impl_name(x, tpd);
    OK(dn_set_dst(n, x, dn_query(tpd, dnnl_query_dst_md, 0)));
    dnnl_memory_t scale, shift, dscale, dshift, rmean, rvar, ws = NULL;
    OK(dn_mem_new(n, &scale, dn_arg_md(tpd, DNNL_ARG_SCALE), n->params + nd->w_off));
    OK(dn_mem_new(n, &shift, dn_arg_md(tpd, DNNL_ARG_SHIFT), n->params + nd->b_off));
    OK(dn_mem_new(n, &dn_state(x)->bn.mean, dn_arg_md(tpd, DNNL_ARG_MEAN), NULL));
    OK(dn_mem_new(n, &dn_state(x)->bn.var, dn_arg_md(tpd, DNNL_ARG_VARIANCE), NULL));
    OK(dn_mem_new(n, &rmean, dn_arg_md(ipd, DNNL_ARG_MEAN), n->buffers + nd->buf_off));
    OK(dn_mem_new(n, &rvar, dn_arg_md(ipd, DNNL_ARG_VARIANCE), n->buffers + nd->buf_off + nd->c));
    if (x->fuse_relu)
        OK(dn_mem_new(n, &ws, dn_query(tpd, dnnl_query_workspace_md, 0), NULL));
    OK(dn_prim_new(n, &tp, tpd));
    OK(dn_prim_new(n, &ip, ipd));
    OK(dn_add_op(n, &dn_state(x)->fwd, tp, NODE_BATCHNORM, DNNL_ARG_SRC, dn_state(px)->dst.mem, DNNL_ARG_SCALE, scale,
              DNNL_ARG_SHIFT, shift, DNNL_ARG_DST, dn_state(x)->dst.mem, DNNL_ARG_MEAN, dn_state(x)->bn.mean,
              DNNL_ARG_VARIANCE, dn_state(x)->bn.var, DNNL_ARG_WORKSPACE, ws, -1));
    OK(dn_add_step(n, &dn_state(x)->fwd, bn_running_stats, NODE_BATCHNORM));
    OK(dn_add_op(n, &dn_state(x)->fwd_infer, ip, NODE_BATCHNORM, DNNL_ARG_SRC, dn_state(px)->dst.mem, DNNL_ARG_SCALE, scale,
              DNNL_ARG_SHIFT, shift, DNNL_ARG_DST, dn_state(x)->dst.mem, DNNL_ARG_MEAN, rmean, DNNL_ARG_VARIANCE,
              rvar, -1));
    OK(DN_PD(n, bpd, NULL,
             dnnl_batch_normalization_backward_primitive_desc_create(&bpd, eng, dnnl_backward, in, in, in, 1e-5f, flags,
                                                                     tpd, NULL)));
    OK(dn_prim_new(n, &bp, bpd));
    OK(dn_mem_new(n, &dscale, dn_arg_md(bpd, DNNL_ARG_DIFF_SCALE), n->grads + nd->w_off));
    OK(dn_mem_new(n, &dshift, dn_arg_md(bpd, DNNL_ARG_DIFF_SHIFT), n->grads + nd->b_off));
    /* No SHIFT: oneDNN 3's backward refuses it as an argument it does not read. */
    return dn_add_bwd_op(n, j, bp, dn_query(bpd, dnnl_query_diff_src_md, 0), NULL, DNNL_ARG_SRC,
                         dn_state(px)->dst.mem, DNNL_ARG_MEAN, dn_state(x)->bn.mean, DNNL_ARG_VARIANCE,
                         dn_state(x)->bn.var, DNNL_ARG_DIFF_DST, dn_state(x)->diff.mem, DNNL_ARG_SCALE, scale,
                         DNNL_ARG_DIFF_SCALE, dscale, DNNL_ARG_DIFF_SHIFT, dshift, DNNL_ARG_WORKSPACE, ws, -1);
}

/* --------------------------------------------- dropout, flatten, add -- */

/* Dropout works on the whole buffer, padding included (0 stays 0), so it
 * runs on any layout; the mask differs from the reference backend's, which
 * indexes plain NCHW. */
/* out = in * mask_scale, element by element, in the type the tensors are
 * kept in (bf16: each product rounded once, as oneDNN's bf16 kernels round
 * their outputs). */
static void scale_by_mask(const struct xnode *x, const void *in, void *out)
{
    const float *ms = dn_state(x)->dropout.mask_scale;
    if (x->stored == ST_DTYPE_BF16) {
        const st_bf16 *a = in;
        st_bf16 *b = out;
        for (size_t i = 0; i < dn_state(x)->elems; i++)
            b[i] = st_bf16_from_f32(st_bf16_to_f32(a[i]) * ms[i]);
    } else {
        const float *a = in;
        float *b = out;
        for (size_t i = 0; i < dn_state(x)->elems; i++)
            b[i] = a[i] * ms[i];
    }
}

static st_status dropout_fwd(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    float *ms = dn_state(x)->dropout.mask_scale;
    const float p = x->nd->drop, scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < dn_state(x)->elems; i++)
        ms[i] = !n->training ? 1.0f : dropout_keep(n->dropout_seed, j, i, p) ? scale : 0.0f;
    scale_by_mask(x, dn_mem_ptr(dn_state(&n->x[x->in])->dst.mem), dn_mem_ptr(dn_state(x)->dst.mem));
    return ST_OK;
}

static st_status dropout_bwd(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    scale_by_mask(x, dn_mem_ptr(dn_state(x)->diff.mem), dn_mem_ptr(dn_state(x)->dropout.diff_src));
    return ST_OK;
}

st_status dn_build_dropout(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    snprintf(x->impl, sizeof x->impl, "C loop");
    OK(dn_set_dst(n, x, dn_state(px)->dst.md));
    if (!(dn_state(x)->dropout.mask_scale = nn_lines_alloc(dn_state(x)->elems, sizeof(float), true)))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    OK(dn_add_step(n, &dn_state(x)->fwd, dropout_fwd, NODE_DROPOUT));
    if (!px->wants_diff)
        return ST_OK;
    OK(dn_mem_new(n, &dn_state(x)->dropout.diff_src, dn_state(px)->dst.md, NULL));
    OK(dn_add_step(n, &dn_state(x)->bwd, dropout_bwd, NODE_DROPOUT));
    dnnl_memory_t target;
    return dn_deliver(n, j, x->in, dn_state(px)->dst.md, dn_state(x)->dropout.diff_src, &target);
}

/* An input already in plain NCHW (mlp's) is read where it is: the input's
 * buffer changes every forward, hence a step rather than a fixed view. */
static st_status flatten_alias(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    TRY(dnnl_memory_set_data_handle(dn_state(x)->dst.mem, dn_mem_ptr(dn_state(&n->x[x->in])->dst.mem)));
    return ST_OK;
}

/* Flatten = reorder to plain NCHW, then read the same buffer as (N, CHW).
 * The 2-D inner product after it then runs as a GEMM with plain weights. */
st_status dn_build_flatten(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const struct node *s = px->nd;
    dnnl_dims_t d4 = {n->batch, s->c, s->h, s->w}, d2 = {n->batch, (dnnl_dim_t)s->c * s->h * s->w};
    const dnnl_data_type_t dt = dn_type_of(x->stored);
    const_dnnl_memory_desc_t md4, md2;
    OK(dn_md_tag(n, &md4, 4, d4, dt, dnnl_nchw));
    OK(dn_md_tag(n, &md2, 2, d2, dt, dnnl_nc));
    snprintf(x->impl, sizeof x->impl, "reorder to nchw");
    OK(dn_set_dst(n, x, md2));
    dnnl_memory_t view, dview, target;
    if (dn_same(dn_state(px)->dst.md, md4)) {
        snprintf(x->impl, sizeof x->impl, "a view of its input");
        OK(dn_add_step(n, &dn_state(x)->fwd, flatten_alias, NODE_FLATTEN));
    } else {
        OK(dn_mem_new(n, &view, md4, dn_mem_ptr(dn_state(x)->dst.mem)));
        OK(dn_add_reorder(n, &dn_state(x)->fwd, dn_state(px)->dst.mem, view));
    }
    if (!px->wants_diff)
        return ST_OK;
    OK(dn_mem_new(n, &dview, md4, dn_mem_ptr(dn_state(x)->diff.mem)));
    return dn_deliver(n, j, x->in, md4, dview, &target);
}

/* Where the add keeps its gradient: in an input's own gradient buffer when
 * the add is that input's only consumer (a transformer's or a residual
 * block's branch), since that input's gradient is exactly the add's and
 * nothing else writes it; so the copy to it goes.  -1: its own buffer. */
static int add_diff_home(const st_net *n, const struct xnode *x, const_dnnl_memory_desc_t md)
{
    const int ins[2] = {x->in2, x->in};
    for (int k = 0; k < 2; k++) {
        const struct xnode *p = &n->x[ins[k]];
        if (p->wants_diff && p->consumers == 1 && dn_same(dn_state(p)->diff.md, md))
            return ins[k];
    }
    return -1;
}

st_status dn_build_add(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *a = &n->x[x->in], *b = &n->x[x->in2];
    /* In a's layout, and in bf16 only when both inputs are (a residual
     * stream in fp32 is not rounded to bf16 by a bf16 branch). */
    const_dnnl_memory_desc_t md = dn_state(a)->dst.md;
    if (dn_dst_type(n, x->in) != dn_type_of(x->stored))
        OK(dn_md_like(n, &md, md, 0, dn_type_of(x->stored)));
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    dnnl_memory_t src0 = dn_state(a)->dst.mem, src1 = dn_state(b)->dst.mem, target;
    if (!dn_same(dn_state(a)->dst.md, md)) {
        OK(dn_mem_new(n, &src0, md, NULL));
        OK(dn_add_reorder(n, &dn_state(x)->fwd, dn_state(a)->dst.mem, src0));
    }
    if (!dn_same(dn_state(b)->dst.md, md)) {
        OK(dn_mem_new(n, &src1, md, NULL));
        OK(dn_add_reorder(n, &dn_state(x)->fwd, dn_state(b)->dst.mem, src1));
    }
    /* A ReLU after it (resnet's blocks) runs as its post-op: one pass
     * over the sum less each step (st-roofline: 1.8% of resnet's). */
    dnnl_primitive_attr_t attr;
    OK(dn_relu_attr(n, x, &attr));
    const st_status st = DN_PD(n, pd, NULL, dnnl_binary_primitive_desc_create(&pd, dn_net(n)->eng, dnnl_binary_add,
                                                                              md, md, md, attr));
    dnnl_primitive_attr_destroy(attr);
    OK(st);
    dn_impl_name(x, pd);
    OK(dn_set_dst_diff_in(n, x, md, add_diff_home(n, x, md)));
    OK(dn_prim_new(n, &p, pd));
    OK(dn_add_op(n, &dn_state(x)->fwd, p, NODE_ADD, DNNL_ARG_SRC_0, src0, DNNL_ARG_SRC_1, src1, DNNL_ARG_DST,
              dn_state(x)->dst.mem, -1));
    if (x->fuse_relu)  /* before the deliveries: both inputs take the pre-activation gradient */
        OK(dn_build_fused_relu_bwd(n, x));
    /* The gradient passes unchanged to both inputs: free to the one whose
     * buffer it shares, a copy to the other (copies, because a producer
     * with other consumers has its diff added to later). */
    OK(dn_deliver(n, j, x->in, dn_state(x)->dst.md, dn_state(x)->diff.mem, &target));
    return dn_deliver(n, j, x->in2, dn_state(x)->dst.md, dn_state(x)->diff.mem, &target);
}

st_status dn_build_input(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    dnnl_dims_t d = {n->batch, nd->c, nd->h, nd->w}, ids = {n->batch, nd->t};
    const_dnnl_memory_desc_t md;
    if (nd->tokens)
        OK(dn_md_tag(n, &md, 2, ids, dnnl_s32, dnnl_ab));
    else
        OK(dn_plain_md(n, &md, 4, d));
    snprintf(x->impl, sizeof x->impl, nd->tokens ? "user token ids" : "user nchw");
    OK(dn_mem_new(n, &dn_net(n)->input_user, md, n->logits /* replaced each forward */));
    dn_state(x)->dst.mem = dn_net(n)->input_user;
    dn_state(x)->dst.md = dn_mem_md(dn_state(x)->dst.mem);
    OK(dn_mem_new(n, &dn_state(x)->diff.mem, md, NULL));
    dn_state(x)->diff.md = dn_mem_md(dn_state(x)->diff.mem);
    return x->consumers > 1 ? dn_accum_new(n, x) : ST_OK;
}
