/* The chunking pass: after every node is built, a convolution whose only
 * consumer is a C max-pool moves into the pool's steps, run in batch chunks
 * small enough that its output stays in L2 (forward), and, for a first
 * layer, its backward-weights pass too.  A pass over the finished plan: the
 * builders know nothing of it, and tuning.no_chunks skips it. */
#define _GNU_SOURCE
#include "onednn_internal.h"

/* A convolution whose only consumer is a C max-pool writes an activation
 * the pool reads once and nobody else needs (the backward passes use the
 * pool's argmax and the convolution's input): megabytes a step, written
 * and read back through memory.  Run in chunks of a few images, the chunk's
 * output stays in L2 for the pool (the gain: docs/benchmarks-history.md,
 * section 2; tuning.no_chunks turns it off). */
#define CHUNK_BYTES (512 * 1024)

static st_status conv_maxpool2_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    struct onednn_node *dn = dn_state(x);
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, dn->chunk.images, x->nd->h, x->nd->w};
    const float *src = dn_mem_ptr(dn->chunk.full_src);
    const float *out = dn_mem_ptr(dn->chunk.args[dn->chunk.nargs - 1].memory);
    float *dst = dn_mem_ptr(dn_state(x)->dst.mem);
    for (int i = 0; i < n->batch; i += dn->chunk.images) {
        dnnl_status_t s = dnnl_memory_set_data_handle(dn->chunk.src, (void *)(src + i * dn->chunk.src_image));
        if (s == dnnl_success)
            s = dnnl_primitive_execute(dn->chunk.conv, dn_net(n)->strm, dn->chunk.nargs, dn->chunk.args);
        if (s != dnnl_success) {
            dn_net(n)->cur = x->in;
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
    const struct onednn_node *dn = dn_state(x);
    const struct maxpool2_shape shape = {dn->pool.src, dn->pool.dst, dn->chunk.images, x->nd->h, x->nd->w};
    const float *src = dn_mem_ptr(dn->chunk.full_src), *dy = dn_mem_ptr(dn->pool.relu ? dn->pool.diff : dn_state(x)->diff.mem);
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
            s = dnnl_primitive_execute(dn->chunk.bwd_w, dn_net(n)->strm, dn->chunk.total_db ? 4 : 3, args);
        if (s == dnnl_success)
            s = dnnl_stream_wait(dn_net(n)->strm);
        if (s != dnnl_success) {
            dn_net(n)->cur = x->in;
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
    struct onednn_node *dn = dn_state(x);
    struct oplist *pb = &dn_state(px)->bwd;
    *moved = false;
    if (n->x[px->in].wants_diff || !pb->n || pb->v[0].step || pb->v[0].prof != NODE_CONV ||
        (pb->n == 2 && pb->v[1].prim && pb->v[1].prof != NODE_KINDS) || pb->n > 2 ||
        dn_arg_of(&pb->v[0], DNNL_ARG_SRC) != dn->chunk.full_src || dn_arg_of(&pb->v[0], DNNL_ARG_DIFF_DST) != dn_state(px)->diff.mem)
        return ST_OK;
    const struct op *bw = &pb->v[0];
    dnnl_memory_t dw = dn_arg_of(bw, DNNL_ARG_DIFF_WEIGHTS), db = dn_arg_of(bw, DNNL_ARG_DIFF_BIAS);
    if (!dw)
        return ST_OK;
    const_dnnl_memory_desc_t diff_md = dn_query(chunk_fwd_pd, dnnl_query_dst_md, 0);
    struct weights_layer w;
    dn_weights_dims(n, px, &w);
    dnnl_primitive_desc_t pd;
    OK(dn_conv_or_ip_bwd_pd(n, px, &w, true, dn_mem_md(dn->chunk.src), dn_mem_md(dw), db ? dn_mem_md(db) : NULL, diff_md,
                            chunk_fwd_pd, &pd));
    if (dn_is_reference_impl(pd) || !dn_same(dn_query(pd, dnnl_query_src_md, 0), dn_mem_md(dn->chunk.src)) ||
        !dn_same(dn_query(pd, dnnl_query_diff_dst_md, 0), diff_md) ||
        !dn_same(dn_query(pd, dnnl_query_diff_weights_md, 0), dn_mem_md(dw)))
        return ST_OK;
    OK(dn_prim_new(n, &dn->chunk.bwd_w, pd));
    OK(dn_mem_new(n, &dn->chunk.diff, diff_md, NULL));
    /* an odd edge row or column gets no gradient: nothing else writes here */
    memset(dn_mem_ptr(dn->chunk.diff), 0, dnnl_memory_desc_get_size(diff_md));
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
 * images per chunk, or 0 when the pair stays as it is.  The pool's own
 * ops are the caller's to change. */
static st_status chunk_the_conv(st_net *n, int j, int *chunk)
{
    struct xnode *x = &n->x[j], *px = &n->x[x->in];
    struct onednn_node *dn = dn_state(x);
    struct oplist *pf = &dn_state(px)->fwd;
    *chunk = 0;
    if (px->kind != NODE_CONV || px->lowp || px->consumers != 1 || px->fuse_relu || !pf->n || pf->v[pf->n - 1].step ||
        pf->v[pf->n - 1].prof != NODE_CONV)
        return ST_OK;
    const size_t image = dnnl_memory_desc_get_size(dn_state(px)->dst.md) / (size_t)n->batch;
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
    const_dnnl_memory_desc_t src_md, dst_md;
    OK(dn_md_like(n, &src_md, dn_query(full, dnnl_query_src_md, 0), c, dnnl_f32));  /* the batch is outermost */
    OK(dn_md_like(n, &dst_md, dn_state(px)->dst.md, c, dnnl_f32));
    struct weights_layer w;
    dn_weights_dims(n, px, &w);
    dnnl_primitive_desc_t pd;
    OK(dn_weights_fwd_pd(n, px, &w, src_md, dn_mem_md(wei), bias ? dn_mem_md(bias) : NULL, dst_md, &pd));
    struct dn_layout chunk_src;
    if (dn_is_reference_impl(pd) || !dn_same(dn_query(pd, dnnl_query_src_md, 0), src_md) ||
        !dn_same(dn_query(pd, dnnl_query_weights_md, 0), dn_mem_md(wei)) ||
        !dn_same(dn_query(pd, dnnl_query_dst_md, 0), dst_md) || !dn_layout_of(src_md, &chunk_src))
        return ST_OK;
    dnnl_memory_t out;
    OK(dn_prim_new(n, &dn->chunk.conv, pd));
    OK(dn_mem_new(n, &dn->chunk.src, src_md, dn_mem_ptr(src)));
    OK(dn_mem_new(n, &out, dst_md, NULL));
    dn->chunk.full_src = src;
    dn->chunk.src_image = chunk_src.strides[0];
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
    return chunk_the_conv_bwd(n, j, pd, &dn->chunk.bwd_moved);
}

/* Rewrites max-pool j's ops to run the convolution before it in chunks. */
static st_status chunk_pool(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct onednn_node *dn = dn_state(x);
    int images;
    OK(chunk_the_conv(n, j, &images));
    if (!images)
        return ST_OK;
    dn->fwd.v[0].step = conv_maxpool2_fwd;  /* was the pool alone */
    dn->fwd.v[0].prof = NODE_CONV;           /* mostly convolution time */
    size_t at = strlen(x->impl);
    snprintf(x->impl + at, sizeof x->impl - at, ", with the conv%s in %d-image chunks",
             dn->chunk.bwd_moved ? " (forward and backward-weights)" : "", images);
    if (!dn->chunk.bwd_moved)
        return ST_OK;
    dn->bwd.n = 0;  /* the pool's backward and delivery give way to the chunked pair */
    return dn_add_step(n, &dn->bwd, maxpool2_conv_bwd, NODE_CONV);
}

st_status dn_chunk_pass(st_net *n)
{
    if (dn_net(n)->opt.no_chunks)
        return ST_OK;
    for (int j = 0; j < n->nx; j++) {
        dn_net(n)->cur = j;  /* the node the ops are for, and messages name */
        if (dn_is_c_maxpool(n, j))
            OK(chunk_pool(n, j));
    }
    dn_net(n)->cur = -1;
    return ST_OK;
}
