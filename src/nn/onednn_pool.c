/* Pooling on oneDNN: the C 2x2 max-pool (maxpool2.c), oneDNN pooling, and a
 * convolution run in L2-sized batch chunks inside the pool's step. */
#define _GNU_SOURCE
#include "onednn_internal.h"

/* 2x2, stride 2 max-pooling without padding (every pool in lenet and cnn)
 * runs in C (maxpool2.c) on the producer's layout when its channels are
 * innermost: in blocks (aBcd16b, aBcd8b) or all together (nhwc). */
static bool channel_innermost(const dnnl_memory_desc_t *md, struct pool_layout *l, dnnl_format_tag_t *tag)
{
    if (md->ndims != 4 || md->format_kind != dnnl_blocked || md->offset0 != 0)
        return false;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (b->inner_nblks == 0 && b->strides[1] == 1 && b->strides[3] == md->padded_dims[1]) {
        l->block = (int)md->padded_dims[1];
        l->nblocks = 1;
        l->sc = 0;
        *tag = dnnl_nhwc;
    } else if (b->inner_nblks == 1 && b->inner_idxs[0] == 1 && (b->inner_blks[0] == 16 || b->inner_blks[0] == 8)) {
        l->block = (int)b->inner_blks[0];
        l->nblocks = (int)(md->padded_dims[1] / l->block);
        l->sc = b->strides[1];
        *tag = l->block == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
    } else {
        return false;
    }
    l->sn = b->strides[0];
    l->sh = b->strides[2];
    l->sw = b->strides[3];
    return true;
}

static st_status maxpool2_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, n->batch, x->nd->h, x->nd->w};
    maxpool2_forward(&shape, dn_mem_ptr(n->x[x->in].dn->dst.mem), dn_mem_ptr(x->dn->dst.mem), dn->pool.arg, dn->pool.relu);
    return ST_OK;
}

static st_status maxpool2_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct xnode *px = &n->x[x->in];
    const struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, n->batch, x->nd->h, x->nd->w};
    float *dx = dn_mem_ptr(dn->pool.target);
    if (!dn->pool.edges_zeroed && (px->nd->h != 2 * x->nd->h || px->nd->w != 2 * x->nd->w))
        memset(dx, 0, dnnl_memory_desc_get_size(&px->dn->dst.md));  /* an odd edge row/column gets no gradient */
    maxpool2_backward(&shape, dn_mem_ptr(dn->pool.relu ? dn->pool.diff : x->dn->diff.mem), dn->pool.arg, dx);
    return ST_OK;
}

/* A convolution whose only consumer is a C max-pool writes an activation
 * the pool reads once and nobody else needs (the backward passes use the
 * pool's argmax and the convolution's input).  For cnn's first layer that
 * is 5.5 MB a step, written and read back through memory.  Run in chunks of
 * a few images, the chunk's output stays in L2 for the pool: forward of
 * that pair, one thread, caches cold, 1.56 -> 0.81 ms. */
#define CHUNK_BYTES (512 * 1024)

static st_status conv_maxpool2_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, dn->chunk.images, x->nd->h, x->nd->w};
    const float *src = dn_mem_ptr(dn->chunk.full_src);
    const float *out = dn_mem_ptr(dn->chunk.args[dn->chunk.nargs - 1].memory);
    float *dst = dn_mem_ptr(x->dn->dst.mem);
    for (int i = 0; i < n->batch; i += dn->chunk.images) {
        dnnl_status_t s = dnnl_memory_set_data_handle(dn->chunk.src, (void *)(src + i * dn->chunk.src_image));
        if (s == dnnl_success)
            s = dnnl_primitive_execute(dn->chunk.conv, n->dnet->strm, dn->chunk.nargs, dn->chunk.args);
        if (s != dnnl_success) {
            n->dnet->cur = x->in;
            return dn_dnnl_error(n, "dnnl_primitive_execute (convolution chunk)", s);
        }
        maxpool2_forward(&shape, out, dst + i * dn->pool.dst.sn, dn->pool.arg + i * dn->pool.dst.sn, dn->pool.relu);
    }
    return ST_OK;
}

static void add_into(dnnl_memory_t total, dnnl_memory_t part)
{
    float *t = dn_mem_ptr(total);
    const float *p = dn_mem_ptr(part);
    const size_t count = dnnl_memory_desc_get_size(dn_mem_md(total)) / sizeof(float);
    for (size_t i = 0; i < count; i++)
        t[i] += p[i];
}

/* The pool's backward and the convolution's backward-weights, chunk by
 * chunk: the gradient of the convolution's output (5.5 MB for cnn) then
 * never leaves L2.  The first chunk's weight gradients go straight to the
 * totals, the others are added in order (deterministic). */
static st_status maxpool2_conv_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, dn->chunk.images, x->nd->h, x->nd->w};
    const float *src = dn_mem_ptr(dn->chunk.full_src), *dy = dn_mem_ptr(dn->pool.relu ? dn->pool.diff : x->dn->diff.mem);
    float *dx = dn_mem_ptr(dn->chunk.diff);
    for (int i = 0; i < n->batch; i += dn->chunk.images) {
        maxpool2_backward(&shape, dy + i * dn->pool.dst.sn, dn->pool.arg + i * dn->pool.dst.sn, dx);
        const bool first = i == 0;
        dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, dn->chunk.src},
                                  {DNNL_ARG_DIFF_DST, dn->chunk.diff},
                                  {DNNL_ARG_DIFF_WEIGHTS, first ? dn->chunk.total_dw : dn->chunk.dw},
                                  {DNNL_ARG_DIFF_BIAS, first ? dn->chunk.total_db : dn->chunk.db}};
        dnnl_status_t s = dnnl_memory_set_data_handle(dn->chunk.src, (void *)(src + i * dn->chunk.src_image));
        if (s == dnnl_success)
            s = dnnl_primitive_execute(dn->chunk.bwd_w, n->dnet->strm, dn->chunk.total_db ? 4 : 3, args);
        if (s == dnnl_success)
            s = dnnl_stream_wait(n->dnet->strm);
        if (s != dnnl_success) {
            n->dnet->cur = x->in;
            return dn_dnnl_error(n, "dnnl_primitive_execute (convolution backward chunk)", s);
        }
        if (!first) {
            add_into(dn->chunk.total_dw, dn->chunk.dw);
            if (dn->chunk.total_db)
                add_into(dn->chunk.total_db, dn->chunk.db);
        }
    }
    return ST_OK;
}

/* After chunk_the_conv: moves the convolution's backward-weights pass into
 * the pool's backward step, in the same chunks, when that is the
 * convolution's only backward pass (a first layer: no gradient to its
 * input) and reads its operands where they are.  Sets *moved. */
static st_status chunk_the_conv_bwd(st_net *n, int j, const_dnnl_primitive_desc_t chunk_fwd_pd, bool *moved)
{
    struct xnode *x = &n->x[j], *px = &n->x[x->in];
    struct onednn_node *dn = x->dn;
    struct oplist *pb = &px->dn->bwd;
    *moved = false;
    if (n->x[px->in].wants_diff || !pb->n || pb->v[0].step || pb->v[0].prof != NODE_CONV ||
        (pb->n == 2 && pb->v[1].prim && pb->v[1].prof != NODE_KINDS) || pb->n > 2 ||
        dn_arg_of(&pb->v[0], DNNL_ARG_SRC) != dn->chunk.full_src || dn_arg_of(&pb->v[0], DNNL_ARG_DIFF_DST) != px->dn->diff.mem)
        return ST_OK;
    const struct op *bw = &pb->v[0];
    dnnl_memory_t dw = dn_arg_of(bw, DNNL_ARG_DIFF_WEIGHTS), db = dn_arg_of(bw, DNNL_ARG_DIFF_BIAS);
    if (!dw)
        return ST_OK;
    dnnl_memory_desc_t diff_md = *dn_query(chunk_fwd_pd, dnnl_query_dst_md, 0);
    struct weights_layer w;
    dn_weights_dims(n, px, &w);
    dnnl_primitive_desc_t pd;
    OK(dn_conv_or_ip_bwd_pd(n, px, &w, true, dn_mem_md(dn->chunk.src), dn_mem_md(dw), db ? dn_mem_md(db) : NULL, &diff_md,
                         chunk_fwd_pd, &pd));
    if (dn_is_reference_impl(pd) || !dn_same(dn_query(pd, dnnl_query_src_md, 0), dn_mem_md(dn->chunk.src)) ||
        !dn_same(dn_query(pd, dnnl_query_diff_dst_md, 0), &diff_md) ||
        !dn_same(dn_query(pd, dnnl_query_diff_weights_md, 0), dn_mem_md(dw)))
        return ST_OK;
    OK(dn_prim_new(n, &dn->chunk.bwd_w, pd));
    OK(dn_mem_new(n, &dn->chunk.diff, &diff_md, NULL));
    /* an odd edge row or column gets no gradient: nothing else writes here */
    memset(dn_mem_ptr(dn->chunk.diff), 0, dnnl_memory_desc_get_size(&diff_md));
    OK(dn_mem_new(n, &dn->chunk.dw, dn_mem_md(dw), NULL));
    if (db)
        OK(dn_mem_new(n, &dn->chunk.db, dn_mem_md(db), NULL));
    dn->chunk.total_dw = dw;
    dn->chunk.total_db = db;
    memmove(&pb->v[0], &pb->v[1], (size_t)(pb->n - 1) * sizeof *pb->v);  /* the reorder to plain, if any, stays */
    pb->n--;
    *moved = true;
    return ST_OK;
}

/* Moves the convolution before max-pool j into the pool's forward step, in
 * chunks, when its output is bigger than CHUNK_BYTES and a chunk-sized
 * primitive gets a real kernel with the same layouts.  Sets *chunk to the
 * images per chunk, or 0 when the pair stays as it is. */
static st_status chunk_the_conv(st_net *n, int j, int *chunk)
{
    struct xnode *x = &n->x[j], *px = &n->x[x->in];
    struct onednn_node *dn = x->dn;
    struct oplist *pf = &px->dn->fwd;
    *chunk = 0;
    if (px->kind != NODE_CONV || px->consumers != 1 || px->fuse_relu || !pf->n || pf->v[pf->n - 1].step ||
        pf->v[pf->n - 1].prof != NODE_CONV || n->dnet->opt.no_chunks)
        return ST_OK;
    const size_t image = dnnl_memory_desc_get_size(&px->dn->dst.md) / (size_t)n->batch;
    int c = 0;
    for (int k = 1; k < n->batch && image * (size_t)n->batch > CHUNK_BYTES; k++)
        if (n->batch % k == 0 && image * (size_t)k <= CHUNK_BYTES)
            c = k;
    const struct op *conv = &pf->v[pf->n - 1];
    dnnl_memory_t src = dn_arg_of(conv, DNNL_ARG_SRC), wei = dn_arg_of(conv, DNNL_ARG_WEIGHTS),
                  bias = dn_arg_of(conv, DNNL_ARG_BIAS);
    if (!c || !src || !wei)
        return ST_OK;
    const_dnnl_primitive_desc_t full;
    TRY(dnnl_primitive_get_primitive_desc(conv->prim, &full));
    /* The primitive's own source description: the memory's may differ in
     * the strides of size-1 dimensions, which kernels match by tag. */
    dnnl_memory_desc_t src_md = *dn_query(full, dnnl_query_src_md, 0), dst_md = px->dn->dst.md;
    src_md.dims[0] = src_md.padded_dims[0] = c;  /* the batch is the outermost dimension */
    dst_md.dims[0] = dst_md.padded_dims[0] = c;
    struct weights_layer w;
    dn_weights_dims(n, px, &w);
    dnnl_primitive_desc_t pd;
    OK(dn_weights_fwd_desc(n, px, &w, &src_md, dn_mem_md(wei), bias ? dn_mem_md(bias) : NULL, &dst_md, &pd));
    if (dn_is_reference_impl(pd) || !dn_same(dn_query(pd, dnnl_query_src_md, 0), &src_md) ||
        !dn_same(dn_query(pd, dnnl_query_weights_md, 0), dn_mem_md(wei)) || !dn_same(dn_query(pd, dnnl_query_dst_md, 0), &dst_md))
        return ST_OK;
    dnnl_memory_t out;
    OK(dn_prim_new(n, &dn->chunk.conv, pd));
    OK(dn_mem_new(n, &dn->chunk.src, &src_md, dn_mem_ptr(src)));
    OK(dn_mem_new(n, &out, &dst_md, NULL));
    dn->chunk.full_src = src;
    dn->chunk.src_image = src_md.format_desc.blocking.strides[0];
    int k = 0;
    dn->chunk.args[k++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, dn->chunk.src};
    dn->chunk.args[k++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wei};
    if (bias)
        dn->chunk.args[k++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bias};
    dn->chunk.args[k++] = (dnnl_exec_arg_t){DNNL_ARG_DST, out};  /* last: conv_maxpool2_fwd reads it there */
    dn->chunk.nargs = k;
    dn->chunk.images = c;
    pf->n--;  /* the whole-batch convolution no longer runs; its primitive stays owned by the net */
    *chunk = c;
    return n->dnet->opt.no_bwd_chunks ? ST_OK : chunk_the_conv_bwd(n, j, pd, &dn->chunk.bwd_moved);
}

static st_status build_maxpool2(st_net *n, int j, dnnl_format_tag_t tag)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    struct onednn_node *dn = x->dn;
    dnnl_dims_t dd = {n->batch, x->nd->c, x->nd->h, x->nd->w};
    dnnl_memory_desc_t md;
    dnnl_format_tag_t dtag;
    TRY(dnnl_memory_desc_init_by_tag(&md, 4, dd, dnnl_f32, tag));
    OK(dn_set_dst(n, x, &md));
    if (!channel_innermost(&x->dn->dst.md, &dn->pool.dst, &dtag) || dn->pool.dst.block != dn->pool.src.block)
        return st_fail(ST_ERR_BACKEND, "max-pool: unexpected output layout (model line %d)", x->nd->line);
    if (!(dn->pool.arg = calloc(dn->elems, 1)))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    int chunk;
    OK(chunk_the_conv(n, j, &chunk));
    int at = snprintf(x->impl, sizeof x->impl, "C 2x2/2 max, %s", tag == dnnl_nhwc ? "nhwc" : "blocked");
    if (chunk && at > 0 && (size_t)at < sizeof x->impl)
        snprintf(x->impl + at, sizeof x->impl - (size_t)at, ", with the conv%s in %d-image chunks",
                 dn->chunk.bwd_moved ? " (forward and backward-weights)" : "", chunk);
    if (chunk)
        OK(dn_add_step(n, &dn->fwd, conv_maxpool2_fwd, NODE_CONV));  /* mostly convolution time */
    else
        OK(dn_add_step(n, &dn->fwd, maxpool2_fwd, NODE_MAXPOOL));
    if (dn->chunk.bwd_moved)
        return dn_add_step(n, &dn->bwd, maxpool2_conv_bwd, NODE_CONV);  /* mostly convolution time */
    if (!px->wants_diff)
        return ST_OK;
    OK(dn_add_step(n, &dn->bwd, maxpool2_bwd, NODE_MAXPOOL));
    OK(dn_deliver(n, j, x->in, &px->dn->dst.md, NULL, &dn->pool.target));
    if (px->consumers == 1 && dn->pool.target == px->dn->diff.mem) {
        /* Only this pool writes there, never to an odd edge: zero it once
         * instead of every step (2 MB for cnn's second pool). */
        memset(dn_mem_ptr(dn->pool.target), 0, dnnl_memory_desc_get_size(&px->dn->dst.md));
        dn->pool.edges_zeroed = true;
    }
    return ST_OK;
}

st_status dn_build_pool(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const struct node *nd = x->nd, *s = px->nd;
    dnnl_format_tag_t tag;
    if (x->kind == NODE_MAXPOOL && nd->k == 2 && nd->s == 2 && nd->p == 0 && !n->dnet->opt.onednn_pool &&
        channel_innermost(&px->dn->dst.md, &x->dn->pool.src, &tag))
        return build_maxpool2(n, j, tag);
    dnnl_alg_kind_t alg = x->kind == NODE_MAXPOOL ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    dnnl_dims_t kernel = {nd->k, nd->k}, strides = {nd->s, nd->s}, pad = {nd->p, nd->p}, dil = {0, 0};
    if (nd->global) {
        kernel[0] = s->h;
        kernel[1] = s->w;
    }
    dnnl_dims_t dst_dims = {n->batch, nd->c, nd->h, nd->w};
    dnnl_memory_desc_t dst_any;
    OK(dn_any_md(n, &dst_any, 4, dst_dims));
    dnnl_pooling_v2_desc_t pdsc;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t f, b;
    TRY(dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_training, alg, &px->dn->dst.md, &dst_any,
                                          strides, kernel, dil, pad, pad));
    OK(dn_pd_new(n, &fpd, &pdsc, NULL, NULL));
    dn_impl_name(x, fpd);
    OK(dn_set_dst(n, x, dn_query(fpd, dnnl_query_dst_md, 0)));
    dnnl_memory_t ws = NULL;
    const dnnl_memory_desc_t *wsmd = dn_query(fpd, dnnl_query_workspace_md, 0);
    if (wsmd && wsmd->ndims > 0)
        OK(dn_mem_new(n, &ws, wsmd, NULL));
    OK(dn_prim_new(n, &f, fpd));
    OK(dn_add_op(n, &x->dn->fwd, f, x->kind, DNNL_ARG_SRC, px->dn->dst.mem, DNNL_ARG_DST, x->dn->dst.mem,
              DNNL_ARG_WORKSPACE, ws, -1));
    if (!px->wants_diff)
        return ST_OK;
    TRY(dnnl_pooling_v2_backward_desc_init(&pdsc, alg, &px->dn->dst.md, &x->dn->dst.md, strides, kernel, dil,
                                           pad, pad));
    OK(dn_pd_new(n, &bpd, &pdsc, NULL, fpd));
    OK(dn_prim_new(n, &b, bpd));
    OK(dn_add_op(n, &x->dn->bwd, b, x->kind, -1));
    int at = x->dn->bwd.n - 1;
    dnnl_memory_t target;
    OK(dn_deliver(n, j, x->in, dn_query(bpd, dnnl_query_diff_src_md, 0), NULL, &target));
    struct op *o = &x->dn->bwd.v[at];
    o->args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, x->dn->diff.mem};
    o->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, ws};
    o->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, target};
    o->nargs = 3;
    return ST_OK;
}

/* ----------------------------------------------------- batch norm -- */
