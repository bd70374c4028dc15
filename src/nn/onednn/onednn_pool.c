/* Pooling on oneDNN: the C 2x2 max-pool (maxpool2.c) and oneDNN pooling.
 * The convolution before a C max-pool may later move into the pool's step
 * (onednn_chunk.c). */
#define _GNU_SOURCE
#include "onednn_internal.h"

/* 2x2, stride 2 max-pooling without padding (every pool in lenet and cnn)
 * runs in C (maxpool2.c) on the producer's layout when its channels are
 * innermost: in blocks (aBcd16b, aBcd8b) or all together (nhwc). */
static bool channel_innermost(const_dnnl_memory_desc_t md, struct pool_layout *p, dnnl_format_tag_t *tag)
{
    struct dn_layout l;
    if (!dn_layout_of(md, &l) || l.ndims != 4 || l.offset0 != 0 || l.dt != dnnl_f32)
        return false;
    if (l.nblks == 0 && l.strides[1] == 1 && l.strides[3] == l.padded[1]) {
        p->block = (int)l.padded[1];
        p->nblocks = 1;
        p->sc = 0;
        *tag = dnnl_nhwc;
    } else if (l.nblks == 1 && l.idxs[0] == 1 && (l.blks[0] == 16 || l.blks[0] == 8)) {
        p->block = (int)l.blks[0];
        p->nblocks = (int)(l.padded[1] / p->block);
        p->sc = l.strides[1];
        *tag = p->block == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
    } else {
        return false;
    }
    p->sn = l.strides[0];
    p->sh = l.strides[2];
    p->sw = l.strides[3];
    return true;
}

static st_status maxpool2_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct onednn_node *dn = dn_state(x);
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, n->batch, x->nd->h, x->nd->w};
    maxpool2_forward(&shape, dn_mem_ptr(dn_state(&n->x[x->in])->dst.mem), dn_mem_ptr(dn_state(x)->dst.mem), dn->pool.arg, dn->pool.relu);
    return ST_OK;
}

static st_status maxpool2_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct xnode *px = &n->x[x->in];
    const struct onednn_node *dn = dn_state(x);
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, n->batch, x->nd->h, x->nd->w};
    float *dx = dn_mem_ptr(dn->pool.target);
    if (!dn->pool.edges_zeroed && (px->nd->h != 2 * x->nd->h || px->nd->w != 2 * x->nd->w))
        memset(dx, 0, dnnl_memory_desc_get_size(dn_state(px)->dst.md));  /* an odd edge row/column gets no gradient */
    maxpool2_backward(&shape, dn_mem_ptr(dn->pool.relu ? dn->pool.diff : dn_state(x)->diff.mem), dn->pool.arg, dx);
    return ST_OK;
}

static st_status build_maxpool2(st_net *n, int j, dnnl_format_tag_t tag)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    struct onednn_node *dn = dn_state(x);
    dnnl_dims_t dd = {n->batch, x->nd->c, x->nd->h, x->nd->w};
    const_dnnl_memory_desc_t md;
    dnnl_format_tag_t dtag;
    OK(dn_md_tag(n, &md, 4, dd, dnnl_f32, tag));
    OK(dn_set_dst(n, x, md));
    if (!channel_innermost(dn_state(x)->dst.md, &dn->pool.dst, &dtag) || dn->pool.dst.block != dn->pool.src.block)
        return st_fail(ST_ERR_BACKEND, "max-pool: unexpected output layout (model line %d)", x->nd->line);
    if (!(dn->pool.arg = calloc(dn->elems, 1)))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    snprintf(x->impl, sizeof x->impl, "C 2x2/2 max, %s", tag == dnnl_nhwc ? "nhwc" : "blocked");
    OK(dn_add_step(n, &dn->fwd, maxpool2_fwd, NODE_MAXPOOL));
    if (!px->wants_diff)
        return ST_OK;
    OK(dn_add_step(n, &dn->bwd, maxpool2_bwd, NODE_MAXPOOL));
    OK(dn_deliver(n, j, x->in, dn_state(px)->dst.md, NULL, &dn->pool.target));
    if (px->consumers == 1 && dn->pool.target == dn_state(px)->diff.mem) {
        /* Only this pool writes there, never to an odd edge: zero it once
         * instead of every step (2 MB for cnn's second pool). */
        memset(dn_mem_ptr(dn->pool.target), 0, dnnl_memory_desc_get_size(dn_state(px)->dst.md));
        dn->pool.edges_zeroed = true;
    }
    return ST_OK;
}

bool dn_is_c_maxpool(const st_net *n, int j)
{
    const struct oplist *f = &dn_state(&n->x[j])->fwd;
    return n->x[j].kind == NODE_MAXPOOL && f->n == 1 && f->v[0].step == maxpool2_fwd;
}

st_status dn_build_pool(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const struct node *nd = x->nd, *s = px->nd;
    dnnl_format_tag_t tag;
    if (x->kind == NODE_MAXPOOL && nd->k == 2 && nd->s == 2 && nd->p == 0 && !dn_net(n)->opt.onednn_pool &&
        channel_innermost(dn_state(px)->dst.md, &dn_state(x)->pool.src, &tag))
        return build_maxpool2(n, j, tag);
    dnnl_alg_kind_t alg = x->kind == NODE_MAXPOOL ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    dnnl_dims_t kernel = {nd->k, nd->k}, strides = {nd->s, nd->s}, pad = {nd->p, nd->p}, dil = {0, 0};
    if (nd->global) {
        kernel[0] = s->h;
        kernel[1] = s->w;
    }
    dnnl_dims_t dst_dims = {n->batch, nd->c, nd->h, nd->w};
    const_dnnl_memory_desc_t dst_any;
    OK(dn_any_md_of(n, &dst_any, 4, dst_dims, dn_dst_type(n, x->in)));
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t f, b;
    OK(DN_PD(n, fpd, NULL,
             dnnl_pooling_forward_primitive_desc_create(&fpd, dn_net(n)->eng, dnnl_forward_training, alg, dn_state(px)->dst.md,
                                                        dst_any, strides, kernel, dil, pad, pad, NULL)));
    dn_impl_name(x, fpd);
    OK(dn_set_dst(n, x, dn_query(fpd, dnnl_query_dst_md, 0)));
    dnnl_memory_t ws = NULL;
    const_dnnl_memory_desc_t wsmd = dn_query(fpd, dnnl_query_workspace_md, 0);
    int ws_ndims = 0;
    if (wsmd && dnnl_memory_desc_query(wsmd, dnnl_query_ndims_s32, &ws_ndims) == dnnl_success && ws_ndims > 0)
        OK(dn_mem_new(n, &ws, wsmd, NULL));
    OK(dn_prim_new(n, &f, fpd));
    OK(dn_add_op(n, &dn_state(x)->fwd, f, x->kind, DNNL_ARG_SRC, dn_state(px)->dst.mem, DNNL_ARG_DST, dn_state(x)->dst.mem,
                 DNNL_ARG_WORKSPACE, ws, -1));
    if (!px->wants_diff)
        return ST_OK;
    /* The forward pd as a hint is required here: oneDNN 3.7.2 faults without one. */
    OK(DN_PD(n, bpd, NULL,
             dnnl_pooling_backward_primitive_desc_create(&bpd, dn_net(n)->eng, alg, dn_state(px)->dst.md, dn_state(x)->dst.md,
                                                         strides, kernel, dil, pad, pad, fpd, NULL)));
    OK(dn_prim_new(n, &b, bpd));
    return dn_add_bwd_op(n, j, b, dn_query(bpd, dnnl_query_diff_src_md, 0), NULL, DNNL_ARG_DIFF_DST,
                         dn_state(x)->diff.mem, DNNL_ARG_WORKSPACE, ws, -1);
}
