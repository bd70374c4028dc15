/* A stem convolution in a oneDNN net: stem.c's kernels as the node's steps,
 * where a one-channel input meets a convolution into a few channels, which
 * oneDNN's kernels would compute padded to 16 (stem.h). */
#define _GNU_SOURCE
#include <omp.h>

#include "onednn_internal.h"

/* fp32 (a bf16 net keeps a one-channel convolution fp32 anyway), on the
 * net's input, stride 1, and no gradient wanted at the input: stem.c has
 * no backward-data pass. */
bool dn_stem_fits(const st_net *n, const struct xnode *x)
{
    const struct xnode *in = &n->x[x->in];
    const struct node *nd = x->nd;
    return x->kind == NODE_CONV && in->kind == NODE_INPUT && !in->nd->tokens && in->nd->c == 1 && !in->wants_diff &&
           nd->c <= STEM_MAX_CHANNELS && nd->s == 1 && nd->k <= STEM_MAX_KERNEL && !x->lowp &&
           !dn_net(n)->opt.onednn_stem;
}

/* Threads this step runs: the pool's, at most as many as it has scratch for. */
static int step_threads(const struct dn_stem_state *st)
{
    const int now = omp_get_max_threads();
    return now < st->threads ? now : st->threads;
}

static st_status stem_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const struct dn_stem_state *st = &dn_state(x)->stem;
    const float *in = dn_mem_ptr(dn_state(&n->x[x->in])->dst.mem), *w = n->params + nd->w_off;
    const float *bias = nd->bias ? n->params + nd->b_off : NULL;
    float *y = dn_mem_ptr(dn_state(x)->dst.mem);
    const long batch = n->batch, in_image = st->shape.h * st->shape.w;
    const long out_image = st->shape.oh * st->shape.ow * st->shape.c;
#pragma omp parallel num_threads(step_threads(st))
    {
        const long t = omp_get_thread_num(), team = omp_get_num_threads();
        const long lo = batch * t / team, hi = batch * (t + 1) / team;
        stem_forward(&st->shape, in + lo * in_image, w, bias, x->fuse_relu, y + lo * out_image, hi - lo,
                     st->scratch + (size_t)t * stem_scratch_floats(&st->shape));
    }
    return ST_OK;
}

static st_status stem_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const struct dn_stem_state *st = &dn_state(x)->stem;
    const float *in = dn_mem_ptr(dn_state(&n->x[x->in])->dst.mem), *dy = dn_mem_ptr(dn_state(x)->diff.mem);
    const float *y = x->fuse_relu ? dn_mem_ptr(dn_state(x)->dst.mem) : NULL;
    const long batch = n->batch, in_image = st->shape.h * st->shape.w;
    const long out_image = st->shape.oh * st->shape.ow * st->shape.c;
    int threads = 1;
#pragma omp parallel num_threads(step_threads(st))
    {
        const long t = omp_get_thread_num(), team = omp_get_num_threads();
        const long lo = batch * t / team, hi = batch * (t + 1) / team;
        if (t == 0)
            threads = (int)team;
        stem_backward_weights(&st->shape, in + lo * in_image, dy + lo * out_image, y ? y + lo * out_image : NULL,
                              hi - lo, st->partials + (size_t)t * stem_partial_floats(&st->shape),
                              st->scratch + (size_t)t * stem_scratch_floats(&st->shape));
    }
    stem_reduce(&st->shape, st->partials, threads, n->grads + nd->w_off, nd->bias ? n->grads + nd->b_off : NULL);
    return ST_OK;
}

/* `floats` of scratch the net owns. */
static st_status scratch(st_net *n, float **out, size_t floats)
{
    const dnnl_dims_t dims = {(dnnl_dim_t)floats};
    const_dnnl_memory_desc_t md;
    dnnl_memory_t mem;
    OK(dn_plain_md(n, &md, 1, dims));
    OK(dn_mem_new(n, &mem, md, NULL));
    *out = dn_mem_ptr(mem);
    return ST_OK;
}

st_status dn_build_stem(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd, *in = n->x[x->in].nd;
    struct dn_stem_state *st = &dn_state(x)->stem;
    st->shape = (struct stem_shape){.h = in->h, .w = in->w, .c = nd->c, .k = nd->k, .pad = nd->p, .oh = nd->h,
                                    .ow = nd->w};
    st->threads = omp_get_max_threads();
    OK(scratch(n, &st->scratch, (size_t)st->threads * stem_scratch_floats(&st->shape)));
    memset(st->scratch, 0, (size_t)st->threads * stem_scratch_floats(&st->shape) * sizeof(float));
    OK(scratch(n, &st->partials, (size_t)st->threads * stem_partial_floats(&st->shape)));
    const dnnl_dims_t dims = {n->batch, nd->c, nd->h, nd->w};
    const_dnnl_memory_desc_t md;
    OK(dn_md_tag(n, &md, 4, dims, dnnl_f32, dnnl_nhwc));
    OK(dn_set_dst(n, x, md));
    snprintf(x->impl, sizeof x->impl, "C stem, 8 channels of 2 pixels a vector, nhwc");
    OK(dn_add_step(n, &dn_state(x)->fwd, stem_fwd, NODE_CONV));
    return dn_add_step(n, &dn_state(x)->bwd, stem_bwd, NODE_CONV);
}
