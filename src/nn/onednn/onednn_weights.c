/* oneDNN convolution and inner product: forward, backward-data, backward-weights,
 * in fp32 or, for precision bf16, in bf16 (outputs in the type the plan gives
 * them, weight gradients in fp32). */
#define _GNU_SOURCE
#include "onednn_internal.h"

void dn_weights_dims(const st_net *n, const struct xnode *x, struct weights_layer *w)
{
    const struct node *nd = x->nd, *s = n->x[x->in].nd;
    memset(w, 0, sizeof *w);
    w->bias[0] = nd->c;
    if (x->kind == NODE_LINEAR) {
        w->ndims = 2;
        const dnnl_dim_t rows = (dnnl_dim_t)nn_rows(n, nd);  /* a sequence's positions are rows too */
        w->src[0] = rows; w->src[1] = s->c * s->h * s->w;
        w->wei[0] = nd->c; w->wei[1] = w->src[1];
        w->dst[0] = rows; w->dst[1] = nd->c;
        return;
    }
    w->ndims = 4;
    dnnl_dim_t src[4] = {n->batch, s->c, s->h, s->w}, wei[4] = {nd->c, s->c, nd->k, nd->k},
               dst[4] = {n->batch, nd->c, nd->h, nd->w};
    memcpy(w->src, src, sizeof src);
    memcpy(w->wei, wei, sizeof wei);
    memcpy(w->dst, dst, sizeof dst);
    w->strides[0] = w->strides[1] = nd->s;
    w->pad[0] = w->pad[1] = nd->p;
}

st_status dn_relu_attr(st_net *n, const struct xnode *x, dnnl_primitive_attr_t *attr)
{
    *attr = NULL;
    if (!x->fuse_relu)
        return ST_OK;
    dnnl_post_ops_t po = NULL;
    dnnl_status_t s = dnnl_primitive_attr_create(attr);
    if (s == dnnl_success)
        s = dnnl_post_ops_create(&po);
    if (s == dnnl_success)
        s = dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0.0f, 0.0f);
    if (s == dnnl_success)
        s = dnnl_primitive_attr_set_post_ops(*attr, po);
    dnnl_post_ops_destroy(po);
    if (s != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
        return dn_dnnl_error(n, "dnnl_post_ops_append_eltwise", s);
    }
    return ST_OK;
}

st_status dn_weights_fwd_pd(st_net *n, const struct xnode *x, const struct weights_layer *w,
                            const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t wei, const_dnnl_memory_desc_t bias,
                            const_dnnl_memory_desc_t dst, dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_attr_t attr;
    dnnl_engine_t eng = dn_net(n)->eng;
    const dnnl_dims_t no_dilation = {0};
    st_status st = dn_relu_attr(n, x, &attr);
    if (st != ST_OK)
        return st;
    if (x->kind == NODE_CONV)
        st = DN_PD(n, *pd, dn_conv_avoid(n, src),
                   dnnl_convolution_forward_primitive_desc_create(pd, eng, dnnl_forward_training,
                                                                  dnnl_convolution_direct, src, wei, bias, dst,
                                                                  w->strides, no_dilation, w->pad, w->pad, attr));
    else
        st = DN_PD(n, *pd, NULL,
                   dnnl_inner_product_forward_primitive_desc_create(pd, eng, dnnl_forward_training, src, wei, bias,
                                                                    dst, attr));
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Inner products take their weights in the plain layout of the parameter
 * buffer (oneDNN's gemm-based kernels accept it) instead of a blocked one:
 * that drops three weight reorders per layer and step, which for small
 * batches cost more than the blocked kernel saves (measured with
 * bench/st-step-ab: docs/benchmarks-history.md, section 2).  tuning.ip_any
 * restores oneDNN's choice for comparison.  Convolutions keep `any`: their blocked
 * kernels are worth the (small) weight reorders. */
static bool plain_weights(const st_net *n, const struct xnode *x)
{
    return x->kind == NODE_LINEAR && !dn_net(n)->opt.ip_any && !x->lowp;  /* bf16 reads converted weights */
}

/* A bf16 inner product reads the optimizer's bf16 copy of its weights in
 * the same plain layout, where a real kernel takes it: the copy is then
 * written in order (a blocked one is a scatter, which cost mlp's step more
 * than the reorder it replaced), but for AMX's many rows (above). */
static bool bf16_plain_weights(const st_net *n, const struct xnode *x)
{
    const bool amx_blocked = dn_amx_rows(n, x) && !dn_net(n)->opt.ip_plain;
    return x->kind == NODE_LINEAR && !dn_net(n)->opt.ip_any && x->lowp && !amx_blocked;
}

/* The output of a small-channel conv read in nhwc: nhwc too, unless it has
 * a whole 16-wide block of channels and the net's next convolution reads
 * in blocks (its input 16 channels or more), where nhwc only meant
 * reorders: resnet's first conv (3 -> 16) feeds two convolutions and a
 * residual add in blocks, four 4 MB activation reorders a step (its step
 * 1.02-1.03x faster without them); lenet's second (6 -> 16) feeds a pool
 * and a flatten, which read nhwc as well (1.1-1.2x slower in blocks;
 * docs/benchmarks.md 0zb). */
static bool next_conv_blocked(const st_net *n, const struct xnode *x)
{
    for (int k = (int)(x - n->x) + 1; k < n->nx; k++)
        if (n->x[k].kind == NODE_CONV)
            return n->x[n->x[k].in].nd->c >= 16;
    return false;
}

static st_status nhwc_output(st_net *n, const struct xnode *x, const struct weights_layer *w,
                             const_dnnl_memory_desc_t *dst)
{
    const bool blocked = x->nd->c == 16 && next_conv_blocked(n, x);
    return dn_md_tag(n, dst, 4, w->dst, dnnl_f32, blocked ? dnnl_aBcd16b : dnnl_nhwc);
}

/* Small channel counts waste most of a 16-wide block; nhwc avoids that
 * (calibration: lenet's 6-channel conv).  But only if all three passes get
 * a real kernel in nhwc: oneDNN 2.6 gives some nhwc backward passes only
 * its reference implementation, a thousand times slower. */
static bool use_nhwc(st_net *n, const struct xnode *x, const struct weights_layer *w)
{
    if (x->kind != NODE_CONV || x->nd->c > 16 || n->x[x->in].nd->c >= 16 || x->lowp)
        return false;
    dnnl_engine_t eng = dn_net(n)->eng;
    const dnnl_dims_t no_dilation = {0};
    const_dnnl_memory_desc_t src, dst, wei, bias;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL, wpd = NULL;
    bool fast = false;
    if (dn_md_tag(n, &src, 4, w->src, dnnl_f32, dnnl_nhwc) || nhwc_output(n, x, w, &dst) ||
        dn_any_md(n, &wei, 4, w->wei) || dn_plain_md(n, &bias, 1, w->bias))
        return false;
    if (!x->nd->bias)
        bias = NULL;
    if (dnnl_convolution_forward_primitive_desc_create(&fpd, eng, dnnl_forward_training, dnnl_convolution_direct, src,
                                                       wei, bias, dst, w->strides, no_dilation, w->pad, w->pad,
                                                       NULL) ||
        dn_is_reference_impl(fpd))
        goto out;
    if (dnnl_convolution_backward_weights_primitive_desc_create(&wpd, eng, dnnl_convolution_direct, src, wei, bias,
                                                                dst, w->strides, no_dilation, w->pad, w->pad, fpd,
                                                                NULL) ||
        dn_is_reference_impl(wpd))
        goto out;
    fast = true;
    if (n->x[x->in].wants_diff)
        fast = !dnnl_convolution_backward_data_primitive_desc_create(&bpd, eng, dnnl_convolution_direct, src, wei, dst,
                                                                     w->strides, no_dilation, w->pad, w->pad, fpd,
                                                                     NULL) &&
               !dn_is_reference_impl(bpd);
out:
    if (bpd)
        dnnl_primitive_desc_destroy(bpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    return fast;
}

st_status dn_conv_or_ip_bwd_pd(st_net *n, const struct xnode *x, const struct weights_layer *w, bool weights_pass,
                               const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t wei,
                               const_dnnl_memory_desc_t bias, const_dnnl_memory_desc_t dst,
                               const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd)
{
    dnnl_engine_t eng = dn_net(n)->eng;
    const dnnl_dims_t no_dilation = {0};
    if (x->kind == NODE_CONV && weights_pass)
        return DN_PD(n, *pd, dn_conv_avoid(n, src),
                     dnnl_convolution_backward_weights_primitive_desc_create(
                         pd, eng, dnnl_convolution_direct, src, wei, bias, dst, w->strides, no_dilation, w->pad,
                         w->pad, hint, NULL));
    if (x->kind == NODE_CONV)
        return DN_PD(n, *pd, dn_conv_avoid(n, src),
                     dnnl_convolution_backward_data_primitive_desc_create(pd, eng, dnnl_convolution_direct, src, wei,
                                                                          dst, w->strides, no_dilation, w->pad,
                                                                          w->pad, hint, NULL));
    const_dnnl_primitive_attr_t ours;  /* the scratchpad shared across layers (dn_op_scratchpad) */
    OK(dn_user_scratchpad(n, &ours));
    if (weights_pass)
        return DN_PD(n, *pd, NULL,
                     dnnl_inner_product_backward_weights_primitive_desc_create(pd, eng, src, wei, bias, dst, hint,
                                                                               ours));
    return DN_PD(n, *pd, NULL,
                 dnnl_inner_product_backward_data_primitive_desc_create(pd, eng, src, wei, dst, hint, ours));
}

/* A backward pd that shares the forward's activation layouts when a real
 * kernel exists for them, else lets the primitive choose (`any`): oneDNN
 * 2.6 gives, e.g., backward-weights of a 1-channel nhwc input only its
 * reference implementation.  `dt` is the layer's compute type: the output
 * gradient is read in it (the output itself stays fp32), and so are the
 * weights of the backward-data pass; weight gradients are always fp32, the
 * master gradient straight out of the kernel. */
static st_status bwd_pd(st_net *n, const struct xnode *x, const struct weights_layer *w, bool weights_pass,
                        dnnl_data_type_t dt, const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t bias,
                        const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd)
{
    const_dnnl_memory_desc_t wei_any, src_any, dst_any, wei_plain, dst;
    OK(dn_md_like(n, &dst, dn_state(x)->dst.md, 0, dt));
    OK(dn_any_md_of(n, &wei_any, w->ndims, w->wei, weights_pass ? dnnl_f32 : dt));
    /* A bf16 layer's weight gradient straight into the flat buffer where a
     * real kernel writes it there: no reorder of it each step. */
    const bool plain_dw = weights_pass && x->lowp;
    if (plain_weights(n, x) || plain_dw || bf16_plain_weights(n, x)) {
        OK(dn_plain_md(n, &wei_plain, w->ndims, w->wei));
        if (!weights_pass && dt == dnnl_bf16)
            OK(dn_md_like(n, &wei_plain, wei_plain, 0, dnnl_bf16));
        OK(dn_conv_or_ip_bwd_pd(n, x, w, weights_pass, src, wei_plain, bias, dst, hint, pd));
        if (!dn_is_reference_impl(*pd) || (x->lowp && dn_net(n)->opt.bf16_any_isa))
            return ST_OK;
    }
    OK(dn_conv_or_ip_bwd_pd(n, x, w, weights_pass, src, wei_any, bias, dst, hint, pd));
    if (!dn_is_reference_impl(*pd) || (x->lowp && dn_net(n)->opt.bf16_any_isa))
        return ST_OK;
    if (dn_net(n)->opt.verbose) {
        char a[256], b[256];
        dn_md_str(a, sizeof a, src);
        dn_md_str(b, sizeof b, dst);
        fprintf(stderr, "shmtrain: node %d: backward-%s gets only a reference kernel with src %s, dst %s: "
                        "letting it choose\n", dn_net(n)->cur, weights_pass ? "weights" : "data", a, b);
    }
    OK(dn_any_md_of(n, &src_any, w->ndims, w->src, dt));
    OK(dn_any_md_of(n, &dst_any, w->ndims, w->dst, dt));
    return dn_conv_or_ip_bwd_pd(n, x, w, weights_pass, src_any, wei_any, bias, dst_any, hint, pd);
}

/* What the three passes of one convolution or inner product share while
 * build_weights makes them. */
struct weights_build {
    struct weights_layer w;
    dnnl_data_type_t dt;                     /* compute type: f32, or bf16 (x->lowp) */
    const_dnnl_memory_desc_t wei_plain, bias_md;  /* the parameter buffer's layouts */
    const_dnnl_primitive_desc_t fwd_pd;      /* owned by the net's pd list */
    dnnl_memory_t w_user, w_fwd;             /* the weights where they live, and as the forward reads them */
    dnnl_memory_t ddst;                      /* the output gradient as backward-weights reads it */
};

/* The forward pd: source and weights in the compute type, the output in
 * the type the plan keeps it in (x->stored). */
static st_status weights_fwd_pd(st_net *n, const struct xnode *x, const struct weights_build *b,
                                dnnl_primitive_desc_t *pd)
{
    const struct weights_layer *w = &b->w;
    const_dnnl_memory_desc_t src_any, wei_any, dst_any;
    if (use_nhwc(n, x, w)) {
        OK(dn_md_tag(n, &src_any, 4, w->src, dnnl_f32, dnnl_nhwc));
        OK(nhwc_output(n, x, w, &dst_any));
    } else {
        OK(dn_any_md_of(n, &src_any, w->ndims, w->src, b->dt));
        OK(dn_any_md_of(n, &dst_any, w->ndims, w->dst, dn_type_of(x->stored)));
    }
    OK(dn_any_md_of(n, &wei_any, w->ndims, w->wei, b->dt));
    const_dnnl_memory_desc_t bias = x->nd->bias ? b->bias_md : NULL;
    *pd = NULL;
    if (plain_weights(n, x) || bf16_plain_weights(n, x)) {
        const_dnnl_memory_desc_t plain = b->wei_plain;
        if (b->dt == dnnl_bf16)
            OK(dn_md_like(n, &plain, b->wei_plain, 0, dnnl_bf16));
        OK(dn_weights_fwd_pd(n, x, w, src_any, plain, bias, dst_any, pd));
        if (dn_is_reference_impl(*pd) && !(b->dt == dnnl_bf16 && dn_net(n)->opt.bf16_any_isa))
            *pd = NULL;  /* owned by the net's pd list, freed with it */
    }
    if (!*pd)
        OK(dn_weights_fwd_pd(n, x, w, src_any, wei_any, bias, dst_any, pd));
    return ST_OK;
}

/* The weights as a bf16 kernel reads them: a copy the optimizer writes in
 * its update pass (nn_copy_add), not a reorder each step.  Where element i
 * of the plain (row-major) weights lies in `mem`'s layout; the padding of a
 * blocked layout is zeroed once and never written. */
static st_status add_weight_copy(st_net *n, const struct xnode *x, dnnl_memory_t mem)
{
    const_dnnl_memory_desc_t md = dn_mem_md(mem);
    struct dn_layout l;
    const size_t count = x->nd->w_count, bytes = dnnl_memory_desc_get_size(md);
    if (!dn_layout_of(md, &l) || bytes / sizeof(st_bf16) > UINT32_MAX)
        return st_fail(ST_ERR_BACKEND, "net: node %d: its bf16 weights' layout is not one the engine can write",
                       dn_net(n)->cur);
    uint32_t *index = malloc(count * sizeof *index);
    if (!index)
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    memset(dn_mem_ptr(mem), 0, bytes);
    bool in_order = true;
    for (size_t i = 0; i < count; i++) {
        dnnl_dim_t idx[DNNL_MAX_NDIMS];
        size_t rest = i;
        for (int d = l.ndims - 1; d >= 0; d--) {
            idx[d] = (dnnl_dim_t)(rest % (size_t)l.dims[d]);
            rest /= (size_t)l.dims[d];
        }
        index[i] = (uint32_t)dn_layout_offset(&l, idx);
        in_order = in_order && index[i] == i;
    }
    if (in_order) {
        free(index);
        index = NULL;
    }
    return nn_copy_add(n, x->nd->w_off, count, dn_mem_ptr(mem), ST_DTYPE_BF16, index);
}

st_status dn_pair_layout(st_net *n, const_dnnl_memory_desc_t md, long rows, long cols, st_copy_layout *layout)
{
    static const struct {
        dnnl_format_tag_t tag;
        bool transposed;  /* md's dims are [cols, rows] */
        st_copy_layout layout;
    } known[] = {
        {dnnl_AB16b64a2b, false, ST_COPY_PAIRS_ALONG_ROWS},
        {dnnl_BA16a64b2a, true, ST_COPY_PAIRS_ALONG_ROWS},
        {dnnl_BA16a64b2a, false, ST_COPY_PAIRS_DOWN_COLUMNS},
    };
    *layout = ST_COPY_LISTED;
    for (size_t k = 0; k < sizeof known / sizeof *known; k++) {
        const dnnl_dims_t dims = {known[k].transposed ? cols : rows, known[k].transposed ? rows : cols};
        const_dnnl_memory_desc_t want;
        OK(dn_md_tag(n, &want, 2, dims, dnnl_bf16, known[k].tag));
        if (dn_same(want, md)) {
            *layout = known[k].layout;
            return ST_OK;
        }
    }
    return ST_OK;
}

st_status dn_add_pair_copy(st_net *n, struct xnode *x, size_t offset, long rows, long cols, dnnl_memory_t mem,
                           bool *added)
{
    st_copy_layout layout;
    *added = false;
    if (dn_net(n)->opt.reordered_copies)
        return ST_OK;
    OK(dn_pair_layout(n, dn_mem_md(mem), rows, cols, &layout));
    if (layout == ST_COPY_LISTED)
        return ST_OK;
    /* its padding stays as dn_mem_new left it: zero */
    *added = dn_state(x)->weights_paired = true;
    return nn_copy_add_pairs(n, offset, rows, cols, dn_mem_ptr(mem), layout);
}

/* A linear layer's bf16 weights in AMX's blocked layout: where it is one
 * of the pair layouts copy_layouts.c writes, the optimizer writes it
 * there; else it writes a plain copy, in order, and a reorder moves it
 * into `mem` before the layer's forward pass each step (counted as a
 * weight reorder).  The scatter add_weight_copy would make writes 4 bytes
 * of a 64-byte line at a time (the layout pairs 64 outputs' elements), and
 * with the index read beside it made the optimizer twice as slow as over
 * plain weights (docs/benchmarks.md 0o, 0p). */
static st_status add_reordered_copy(st_net *n, struct xnode *x, struct oplist *l, dnnl_memory_t user,
                                    dnnl_memory_t mem)
{
    const_dnnl_memory_desc_t plain;
    dnnl_memory_t copy;
    OK(dn_md_like(n, &plain, dn_mem_md(user), 0, dnnl_bf16));
    if (dn_same(plain, dn_mem_md(mem)))  /* the plain copy is what the kernel reads */
        return add_weight_copy(n, x, mem);
    const long in = (long)(x->nd->w_count / (size_t)x->nd->c);
    bool paired;
    OK(dn_add_pair_copy(n, x, x->nd->w_off, x->nd->c, in, mem, &paired));
    if (paired)
        return ST_OK;
    OK(dn_mem_new(n, &copy, plain, NULL));
    OK(nn_copy_add(n, x->nd->w_off, x->nd->w_count, dn_mem_ptr(copy), ST_DTYPE_BF16, NULL));
    const int at = l->n;
    OK(dn_add_reorder(n, l, copy, mem));
    l->v[at].counted = OP_COUNTS_WEIGHT_REORDER;
    return ST_OK;
}

/* The weights in the layout `mem` has: the flat buffer's fp32 reordered each
 * pass, or, in bf16, the optimizer's copy (for AMX's blocked linear
 * weights written in that layout where copy_layouts.c has it, else plain
 * and reordered). */
static st_status weights_into(st_net *n, struct xnode *x, struct oplist *l, dnnl_memory_t user,
                              dnnl_memory_t mem)
{
    if (dn_md_type(dn_mem_md(mem)) != dnnl_bf16)
        return dn_add_reorder(n, l, user, mem);
    return x->kind == NODE_LINEAR ? add_reordered_copy(n, x, l, user, mem) : add_weight_copy(n, x, mem);
}

static st_status build_weights_fwd(st_net *n, int j, struct weights_build *b)
{
    struct xnode *x = &n->x[j];
    struct onednn_node *dn = dn_state(x);
    const struct node *nd = x->nd;
    dnnl_primitive_desc_t pd;
    OK(weights_fwd_pd(n, x, b, &pd));
    if (x->lowp && dn_is_reference_impl(pd) && !dn_net(n)->opt.bf16_any_isa) {
        /* a bf16 reference kernel would crawl: this layer computes in fp32 */
        if (dn_net(n)->opt.verbose)
            fprintf(stderr, "shmtrain: node %d: no bf16 kernel but oneDNN's reference: fp32\n", j);
        nn_plan_fallback(n, j);
        b->dt = dnnl_f32;
        OK(weights_fwd_pd(n, x, b, &pd));
    }
    b->fwd_pd = pd;
    dn_impl_name(x, pd);

    dnnl_memory_t b_user = NULL;
    OK(dn_mem_new(n, &b->w_user, b->wei_plain, n->params + nd->w_off));
    if (nd->bias)
        OK(dn_mem_new(n, &b_user, b->bias_md, n->params + nd->b_off));
    const_dnnl_memory_desc_t wf = dn_query(pd, dnnl_query_weights_md, 0);
    if (dn_same(wf, b->wei_plain)) {
        b->w_fwd = b->w_user;
    } else {
        OK(dn_mem_new(n, &b->w_fwd, wf, NULL));
        OK(weights_into(n, x, &dn->fwd, b->w_user, b->w_fwd));
    }
    OK(dn_input_as(n, x, dn_query(pd, dnnl_query_src_md, 0), &dn->src));
    OK(dn_set_dst(n, x, dn_query(pd, dnnl_query_dst_md, 0)));
    dnnl_primitive_t fwd;
    OK(dn_prim_new(n, &fwd, pd));
    return dn_add_op(n, &dn->fwd, fwd, x->kind, DNNL_ARG_SRC, dn->src, DNNL_ARG_WEIGHTS, b->w_fwd, DNNL_ARG_BIAS,
                  b_user, DNNL_ARG_DST, dn_state(x)->dst.mem, -1);
}

st_status dn_build_fused_relu_bwd(st_net *n, struct xnode *x)
{
    const_dnnl_memory_desc_t md = dn_state(x)->dst.md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    OK(DN_PD(n, pd, NULL,
             dnnl_eltwise_backward_primitive_desc_create(&pd, dn_net(n)->eng, dnnl_eltwise_relu_use_dst_for_bwd, md, md,
                                                         md, 0.0f, 0.0f, NULL, NULL)));
    OK(dn_prim_new(n, &p, pd));
    return dn_add_op(n, &dn_state(x)->bwd, p, NODE_RELU, DNNL_ARG_DST, dn_state(x)->dst.mem, DNNL_ARG_DIFF_DST, dn_state(x)->diff.mem,
                     DNNL_ARG_DIFF_SRC, dn_state(x)->diff.mem, -1);
}

/* The forward's own description of its source, not the producer's: they
 * are equal to dnnl_memory_desc_equal when they differ only in the strides
 * of size-1 dimensions (1-channel nchw == nhwc), but the backward kernels
 * match layouts by tag, and the producer's tag would get lenet's first
 * convolution only the reference kernel and a 3 MB reorder per step. */
static const_dnnl_memory_desc_t fwd_src_md(const struct weights_build *b)
{
    return dn_query(b->fwd_pd, dnnl_query_src_md, 0);
}

static st_status build_weights_bwd_w(st_net *n, int j, struct weights_build *b)
{
    struct xnode *x = &n->x[j];
    struct onednn_node *dn = dn_state(x);
    const struct node *nd = x->nd;
    dnnl_primitive_desc_t pd;
    dnnl_memory_t src, ddst, dw_user, dw, db_user = NULL;
    if (dn_wgrad_matmul_wanted(n, x)) {
        bool built;
        OK(dn_build_wgrad_matmul(n, j, &b->w, &b->ddst, &built));
        if (built)
            return ST_OK;
    }
    OK(bwd_pd(n, x, &b->w, true, b->dt, fwd_src_md(b), nd->bias ? b->bias_md : NULL, b->fwd_pd, &pd));
    dn_impl_name(x, pd);
    OK(dn_bwd_input(n, &dn->bwd, dn->src, dn_query(pd, dnnl_query_src_md, 0), DN_TEMP_SRC, &src));
    OK(dn_bwd_input(n, &dn->bwd, dn_state(x)->diff.mem, dn_query(pd, dnnl_query_diff_dst_md, 0), DN_TEMP_DIFF_DST, &ddst));
    b->ddst = ddst;
    OK(dn_mem_new(n, &dw_user, b->wei_plain, n->grads + nd->w_off));
    if (nd->bias)
        OK(dn_mem_new(n, &db_user, b->bias_md, n->grads + nd->b_off));
    const_dnnl_memory_desc_t dwm = dn_query(pd, dnnl_query_diff_weights_md, 0);
    dw = dw_user;
    if (!dn_same(dwm, b->wei_plain))
        OK(dn_mem_new(n, &dw, dwm, NULL));
    dnnl_primitive_t bw;
    OK(dn_prim_new(n, &bw, pd));
    OK(dn_add_op(n, &dn->bwd, bw, x->kind, DNNL_ARG_SRC, src, DNNL_ARG_DIFF_DST, ddst, DNNL_ARG_DIFF_WEIGHTS, dw,
              DNNL_ARG_DIFF_BIAS, db_user, -1));
    OK(dn_op_scratchpad(n, &dn->bwd.v[dn->bwd.n - 1], pd));
    return dw != dw_user ? dn_add_reorder(n, &dn->bwd, dw, dw_user) : ST_OK;
}

static st_status build_weights_bwd_data(st_net *n, int j, const struct weights_build *b)
{
    struct xnode *x = &n->x[j];
    struct onednn_node *dn = dn_state(x);
    dnnl_primitive_desc_t pd;
    dnnl_memory_t ddst;
    /* The input gradient in the type its producer keeps it in: bf16 where
     * the producer's output is bf16, else fp32 even from bf16 operands (no
     * rounding to bf16 and no conversion back before it is delivered).
     * Where oneDNN has no real kernel for that, bwd_pd lets it choose. */
    const_dnnl_memory_desc_t diff_src_md;
    OK(dn_md_like(n, &diff_src_md, fwd_src_md(b), 0, dn_dst_type(n, x->in)));
    OK(bwd_pd(n, x, &b->w, false, b->dt, diff_src_md, NULL, b->fwd_pd, &pd));
    const_dnnl_memory_desc_t want = dn_query(pd, dnnl_query_diff_dst_md, 0);
    if (dn_same(want, dn_mem_md(b->ddst)))
        ddst = b->ddst;  /* converted (or reordered) once for both passes, before either runs */
    else
        OK(dn_bwd_input(n, &dn->bwd, dn_state(x)->diff.mem, want, DN_TEMP_DIFF_DST_DATA, &ddst));
    dn_impl_name(x, pd);
    /* The weights change every step: fp32 ones are reordered into this
     * layout every backward pass (after the optimizer ran); bf16 ones are
     * the optimizer's copy. */
    const_dnnl_memory_desc_t wb = dn_query(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t w_bwd = dn_same(wb, dn_mem_md(b->w_fwd)) ? b->w_fwd : dn_same(wb, b->wei_plain) ? b->w_user : NULL;
    if (!w_bwd) {
        OK(dn_mem_new(n, &w_bwd, wb, NULL));
        OK(weights_into(n, x, &dn->bwd, b->w_user, w_bwd));
    }
    dnnl_primitive_t bd;
    struct op *o;
    OK(dn_prim_new(n, &bd, pd));
    OK(dn_add_bwd_op(n, j, bd, dn_query(pd, dnnl_query_diff_src_md, 0), &o, DNNL_ARG_DIFF_DST, ddst, DNNL_ARG_WEIGHTS,
                     w_bwd, -1));
    return dn_op_scratchpad(n, o, pd);
}

/* Says in the node's description that it computes in bf16: read back from
 * the forward pd (what oneDNN will run), not from the request. */
static st_status mark_precision(struct xnode *x, const struct weights_build *b)
{
    if (dn_md_type(dn_query(b->fwd_pd, dnnl_query_src_md, 0)) != dnnl_bf16)
        return ST_OK;
    static const char tag[] = "bf16: ";
    const size_t t = sizeof tag - 1, keep = strnlen(x->impl, sizeof x->impl - t - 1);
    memmove(x->impl + t, x->impl, keep);
    memcpy(x->impl, tag, t);
    x->impl[t + keep] = '\0';
    if (dn_state(x)->weights_paired)
        snprintf(x->impl + t + keep, sizeof x->impl - t - keep, ", weights in AMX's layout from the optimizer");
    return ST_OK;
}

/* A linear layer: on a sequence, the sequence kernels' sgemm calls where
 * they fit (fp32, no fused ReLU: dn_seq_linear_fits),
 * else oneDNN's inner product. */
st_status dn_build_linear(st_net *n, int j)
{
    return dn_seq_linear_fits(n, &n->x[j]) ? dn_build_seq_linear(n, j) : dn_build_weights(n, j);
}

/* A convolution: stem.c's where it is a one-channel stem (dn_stem_fits),
 * else oneDNN's. */
st_status dn_build_conv(st_net *n, int j)
{
    return dn_stem_fits(n, &n->x[j]) ? dn_build_stem(n, j) : dn_build_weights(n, j);
}

/* A convolution or inner product: forward; backward (a fused ReLU's first,
 * then backward-weights, then backward-data unless nothing learns upstream). */
st_status dn_build_weights(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct weights_build b = {.dt = dn_type_of(x->compute)};
    dn_weights_dims(n, x, &b.w);
    OK(dn_plain_md(n, &b.bias_md, 1, b.w.bias));
    OK(dn_plain_md(n, &b.wei_plain, b.w.ndims, b.w.wei));
    OK(build_weights_fwd(n, j, &b));
    if (x->fuse_relu)
        OK(dn_build_fused_relu_bwd(n, x));
    OK(build_weights_bwd_w(n, j, &b));
    if (n->x[x->in].wants_diff)  /* else the first layer: nobody needs d/d(input) */
        OK(build_weights_bwd_data(n, j, &b));
    return mark_precision(x, &b);
}
