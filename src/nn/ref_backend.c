/* The reference backend: every layer in plain C on NCHW / (N, C) arrays,
 * through the kernels of ref.c.  It is the definition every fast path is
 * tested against, and it runs the same exec graph as oneDNN does. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

static struct conv_shape window_shape(const st_net *n, const struct xnode *x, const struct node *src)
{
    const struct node *nd = x->nd;
    struct conv_shape cs = {.n = n->batch, .c = src->c, .h = src->h, .w = src->w, .o = nd->c,
                            .oh = nd->h, .ow = nd->w, .kh = nd->k, .kw = nd->k, .s = nd->s, .p = nd->p};
    if (nd->global) {
        cs.kh = src->h;
        cs.kw = src->w;
    }
    return cs;
}

static st_status ref_build(st_net *n)
{
    for (int j = 0; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        const size_t sz = nn_node_size(n, x->nd);
        const size_t in_sz = x->in >= 0 ? nn_node_size(n, n->x[x->in].nd) : 0;
        snprintf(x->impl, sizeof x->impl, "reference");
        x->dst.plain = calloc(sz, sizeof(float));
        x->diff.plain = calloc(sz, sizeof(float));
        x->ref_diff_src = in_sz ? calloc(in_sz, sizeof(float)) : NULL;
        bool ok = x->dst.plain && x->diff.plain && (!in_sz || x->ref_diff_src);
        if (x->kind == NODE_MAXPOOL)
            ok = ok && (x->argmax = calloc(sz, sizeof(int)));
        if (x->kind == NODE_BATCHNORM)
            ok = ok && (x->mean = calloc((size_t)x->nd->c, sizeof(float))) &&
                 (x->var = calloc((size_t)x->nd->c, sizeof(float)));
        if (x->kind == NODE_DROPOUT)
            ok = ok && (x->mask = calloc(sz, 1));
        if (!ok)
            return st_fail(ST_ERR_NOMEM, "net: out of memory for layer %d", j);
    }
    return ST_OK;
}

static void ref_destroy(st_net *n)
{
    for (int j = 0; n->x && j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        free(x->dst.plain);
        free(x->diff.plain);
        free(x->ref_diff_src);
        free(x->argmax);
        free(x->mean);
        free(x->var);
        free(x->mask);
    }
}

static void update_running_stats(st_net *n, const struct node *nd, const float *mean, const float *var)
{
    const float momentum = 0.1f;
    const double m = (double)n->batch * nd->h * nd->w;
    float *rm = n->buffers + nd->buf_off, *rv = rm + nd->c;
    for (int c = 0; c < nd->c; c++) {
        rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
        rv[c] = (1 - momentum) * rv[c] + momentum * (float)(var[c] * (m > 1 ? m / (m - 1) : 1.0));
    }
}

static void ref_forward_node(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const float *src = x->in >= 0 ? n->x[x->in].dst.plain : NULL;
    const struct node *s = x->in >= 0 ? n->x[x->in].nd : NULL;
    float *y = x->dst.plain;
    const size_t sz = nn_node_size(n, nd);
    switch (x->kind) {
    case NODE_INPUT: memcpy(y, n->input, sz * sizeof(float)); break;
    case NODE_CONV: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_conv_fwd(y, src, n->params + nd->w_off, nd->bias ? n->params + nd->b_off : NULL, &cs);
        break;
    }
    case NODE_LINEAR:
        ref_linear_fwd(y, src, n->params + nd->w_off, nd->bias ? n->params + nd->b_off : NULL, n->batch,
                       s->c * s->h * s->w, nd->c);
        break;
    case NODE_RELU: ref_relu_fwd(y, src, sz); break;
    case NODE_MAXPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_maxpool_fwd(y, x->argmax, src, &cs);
        break;
    }
    case NODE_AVGPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_avgpool_fwd(y, src, &cs);
        break;
    }
    case NODE_BATCHNORM: {
        const float *g = n->params + nd->w_off, *b = n->params + nd->b_off;
        if (n->training) {
            ref_bn_fwd_train(y, x->mean, x->var, src, g, b, n->batch, nd->c, nd->h * nd->w, 1e-5f);
            update_running_stats(n, nd, x->mean, x->var);
        } else {
            const float *rm = n->buffers + nd->buf_off;
            ref_bn_fwd_infer(y, src, g, b, rm, rm + nd->c, n->batch, nd->c, nd->h * nd->w, 1e-5f);
        }
        break;
    }
    case NODE_DROPOUT: {
        const float scale = 1.0f / (1.0f - nd->drop);
        for (size_t i = 0; i < sz; i++) {
            x->mask[i] = !n->training || dropout_keep(n->dropout_seed, j, i, nd->drop);
            y[i] = n->training ? (x->mask[i] ? src[i] * scale : 0.0f) : src[i];
        }
        break;
    }
    case NODE_FLATTEN: memcpy(y, src, sz * sizeof(float)); break;
    case NODE_ADD: {
        const float *b = n->x[x->in2].dst.plain;
        for (size_t i = 0; i < sz; i++)
            y[i] = src[i] + b[i];
        break;
    }
    case NODE_KINDS: break;
    }
    if (x->fuse_relu)
        ref_relu_fwd(y, y, sz);
}

static st_status ref_forward(st_net *n, const float *input)
{
    n->input = input;
    for (int j = 0; j < n->nx; j++) {
        double t0 = n->profiling ? nn_now() : 0;
        ref_forward_node(n, j);
        if (n->profiling)
            n->prof[n->x[j].kind] += nn_now() - t0;
    }
    memcpy(n->logits, n->x[n->nx - 1].dst.plain, st_net_output_size(n) * sizeof(float));
    return ST_OK;
}

/* Hand `grad` (the gradient w.r.t. node p's output, from consumer j) to p. */
static void ref_deliver(st_net *n, int p, int j, const float *grad)
{
    struct xnode *px = &n->x[p];
    if (!px->wants_diff)
        return;
    const size_t sz = nn_node_size(n, px->nd);
    if (px->first_writer == j) {
        memcpy(px->diff.plain, grad, sz * sizeof(float));
    } else {
        for (size_t i = 0; i < sz; i++)
            px->diff.plain[i] += grad[i];
    }
}

static void ref_backward_node(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    if (x->kind == NODE_INPUT)
        return;
    const struct xnode *px = &n->x[x->in];
    const struct node *s = px->nd;
    const float *src = px->dst.plain;
    float *dy = x->diff.plain, *dx = px->wants_diff ? x->ref_diff_src : NULL;
    const size_t sz = nn_node_size(n, nd);
    if (x->fuse_relu)
        ref_relu_bwd(dy, dy, x->dst.plain, sz);
    switch (x->kind) {
    case NODE_CONV: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_conv_bwd(dx, n->grads + nd->w_off, nd->bias ? n->grads + nd->b_off : NULL, dy, src,
                     n->params + nd->w_off, &cs);
        break;
    }
    case NODE_LINEAR:
        ref_linear_bwd(dx, n->grads + nd->w_off, nd->bias ? n->grads + nd->b_off : NULL, dy, src,
                       n->params + nd->w_off, n->batch, s->c * s->h * s->w, nd->c);
        break;
    case NODE_RELU:
        if (dx)
            ref_relu_bwd(dx, dy, src, sz);
        break;
    case NODE_MAXPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        if (dx)
            ref_maxpool_bwd(dx, dy, x->argmax, &cs);
        break;
    }
    case NODE_AVGPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        if (dx)
            ref_avgpool_bwd(dx, dy, &cs);
        break;
    }
    case NODE_BATCHNORM:
        ref_bn_bwd(dx, n->grads + nd->w_off, n->grads + nd->b_off, dy, src, x->mean, x->var,
                   n->params + nd->w_off, n->batch, nd->c, nd->h * nd->w, 1e-5f);
        break;
    case NODE_DROPOUT: {
        const float scale = n->training ? 1.0f / (1.0f - nd->drop) : 1.0f;
        for (size_t i = 0; dx && i < sz; i++)
            dx[i] = x->mask[i] ? dy[i] * scale : 0.0f;
        break;
    }
    case NODE_FLATTEN:
        if (dx)
            memcpy(dx, dy, sz * sizeof(float));
        break;
    case NODE_ADD:
        ref_deliver(n, x->in, j, dy);
        ref_deliver(n, x->in2, j, dy);
        return;
    default: break;
    }
    if (dx)
        ref_deliver(n, x->in, j, dx);
}

static st_status ref_backward(st_net *n)
{
    for (int j = n->nx - 1; j >= 0; j--) {
        double t0 = n->profiling ? nn_now() : 0;
        ref_backward_node(n, j);
        if (n->profiling)
            n->prof[n->x[j].kind] += nn_now() - t0;
    }
    if (n->cfg.input_grad)
        memcpy(n->input_grad, n->x[0].diff.plain, nn_node_size(n, n->x[0].nd) * sizeof(float));
    return ST_OK;
}

static st_status ref_backward_from(st_net *n, const float *d_output)
{
    memcpy(n->x[n->nx - 1].diff.plain, d_output, (size_t)n->batch * (size_t)st_model_classes(n->model) * sizeof(float));
    return ref_backward(n);
}

static st_status ref_input_grad(st_net *n, float *out)
{
    memcpy(out, n->x[0].diff.plain, nn_node_size(n, n->x[0].nd) * sizeof(float));
    return ST_OK;
}

const struct nn_backend nn_reference_backend = {
    .name = "reference",
    .build = ref_build,
    .forward = ref_forward,
    .backward_from = ref_backward_from,
    .input_grad = ref_input_grad,
    .destroy = ref_destroy,
};
