/* The oneDNN backend's build, executor and teardown, and its function table. */
#define _GNU_SOURCE
#include "onednn_internal.h"
#include "kernels/causal_bf16.h"

/* The last node's output as plain (batch, outputs) logits, and back. */
static st_status build_loss_io(st_net *n)
{
    if (n->fused_loss)  /* no logits to copy out: the head and loss make them a chunk at a time */
        return ST_OK;
    struct xnode *last = &n->x[n->nx - 1];
    const struct node *nd = last->nd;
    struct onednn_net *d = dn_net(n);
    const_dnnl_memory_desc_t md;
    dnnl_dims_t d4 = {n->batch, nd->c, nd->h, nd->w}, d2 = {(dnnl_dim_t)nn_rows(n, nd), nd->c};
    OK(dn_plain_md(n, &md, nd->flat ? 2 : 4, nd->flat ? d2 : d4));
    OK(dn_mem_new(n, &d->logits_user, md, n->logits));
    OK(dn_mem_new(n, &d->dlast_user, md, n->dlogits));
    d->cur = n->nx - 1;
    OK(dn_add_reorder(n, &d->to_logits, dn_state(last)->dst.mem, d->logits_user));
    OK(dn_add_reorder(n, &d->from_dlast, d->dlast_user, dn_state(last)->diff.mem));
    d->cur = -1;
    return ST_OK;
}

/* ----------------------------------------------------------------- API -- */

/* Each layer kind's builder, from the layer table (layers.h). */
static st_status (*const builders[])(st_net *n, int j) = {
#define BUILDER(KIND, keyword, parse, init, scratch, fwd, bwd, build, ...) [NODE_##KIND] = build,
    NN_LAYER_TABLE(BUILDER)
#undef BUILDER
};
_Static_assert(sizeof builders / sizeof *builders == NODE_KINDS, "a oneDNN builder per layer kind");


/* oneDNN computes in bf16 only (its fp16 kernels, AVX512-FP16 and
 * AMX-FP16, are not wired); attention's bf16 products need the
 * instruction itself (its emulation, bf16_any_isa, does not reach a C
 * kernel), and oneDNN's own layer norm (tuning.onednn_layernorm) writes
 * fp32 only. */
static bool onednn_computes(const st_net *n, const struct xnode *x, st_dtype type)
{
    if (type != ST_DTYPE_BF16)
        return false;
    switch (x->kind) {
    case NODE_ATTENTION: return causal_bf16_available() && !n->cfg.tuning.attention_fp32;
    case NODE_LAYERNORM: return !n->cfg.tuning.onednn_layernorm;
    default: return true;
    }
}

static st_status onednn_takes(st_dtype precision, const st_nn_tuning *t)
{
    if (precision == ST_DTYPE_F16)
        return st_fail(ST_ERR_INVALID, "precision fp16: oneDNN's fp16 kernels are not wired here (the reference "
                                       "backend defines fp16 nets); fp16 travels as a gradient exchange's type "
                                       "(--allreduce-dtype fp16)");
    /* No emulated crawl: oneDNN runs bf16 on AVX-512 without BF16 by
     * emulation, and not at all below it. */
    if (!st_nn_native(precision, t))
        return st_fail(ST_ERR_INVALID, "precision %s: this CPU has no native %s in oneDNN (its ISA: %s; bf16 "
                                       "needs AVX512-BF16 or AMX)", st_dtype_name(precision), st_dtype_name(precision),
                       st_nn_onednn_isa());
    return ST_OK;
}

/* The plan is the contract: a node whose memory the builders made in
 * another type than the plan's is a builder's bug, not a new plan (a
 * fallback is said with nn_plan_fallback before it is built). */
static st_status built_as_planned(st_net *n)
{
    for (int j = 1; j < n->nx; j++) {
        const st_dtype built = dn_dst_type(n, j) == dnnl_bf16 ? ST_DTYPE_BF16 : ST_DTYPE_F32;
        if (built != n->x[j].stored)
            return st_fail(ST_ERR_BACKEND, "net: node %d built to keep %s where the plan says %s", j,
                           st_dtype_name(built), st_dtype_name(n->x[j].stored));
    }
    return ST_OK;
}

static st_status new_nodes(st_net *n)
{
    for (int j = 0; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        if (!(x->be = calloc(1, sizeof(struct onednn_node))))
            return st_fail(ST_ERR_NOMEM, "net: out of memory");
        dn_state(x)->diff_home = -1;
    }
    return ST_OK;
}

static st_status onednn_build(st_net *n)
{
    n->be_net = calloc(1, sizeof(struct onednn_net));
    if (!dn_net(n))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    dn_net(n)->cur = -1;
    dn_net(n)->opt = n->cfg.tuning;
    TRY(dnnl_engine_create(&dn_net(n)->eng, dnnl_cpu, 0));
    TRY(dnnl_stream_create(&dn_net(n)->strm, dn_net(n)->eng, dnnl_stream_default_flags));
    OK(new_nodes(n));
    dn_net(n)->diffs_shared = dn_diffs_shared(n);
    for (int j = 0; j < n->nx; j++) {
        dn_net(n)->cur = j;
        OK(builders[n->x[j].kind](n, j));
    }
    dn_net(n)->cur = -1;
    OK(dn_chunk_pass(n));
    OK(dn_share_diffs(n));
    OK(built_as_planned(n));
    return build_loss_io(n);
}

static st_status run(st_net *n, const struct oplist *l)
{
    for (int i = 0; i < l->n; i++) {
        const struct op *o = &l->v[i];
        double t0 = n->profiling ? st_now_s() : 0;
        if (o->step) {
            st_status st = o->step(n, o->node);
            if (st != ST_OK)
                return st;
        } else {
            dnnl_status_t s = dnnl_primitive_execute(o->prim, dn_net(n)->strm, o->nargs, o->args);
            if (s != dnnl_success) {
                dn_net(n)->cur = o->node;
                return dn_dnnl_error(n, "dnnl_primitive_execute", s);
            }
        }
        if (n->profiling)
            n->prof[o->prof] += st_now_s() - t0;
        if (o->counted == OP_COUNTS_CONVERSION) {
            n->counters.conversions++;
            n->counters.converted_bytes += o->counted_bytes;
        } else if (o->counted == OP_COUNTS_WEIGHT_REORDER) {
            n->counters.weight_reorders++;
        } else if (o->counted == OP_COUNTS_ACTIVATION_REORDER) {
            n->counters.activation_reorders++;
        }
    }
    return ST_OK;
}

static st_status onednn_forward(st_net *n, const void *input)
{
    struct onednn_net *d = dn_net(n);
    TRY(dnnl_memory_set_data_handle(d->input_user, (void *)input));
    for (int j = 1; j < n->nx; j++) {
        const struct onednn_node *dn = dn_state(&n->x[j]);
        bool infer = !n->training && dn->fwd_infer.n > 0;
        OK(run(n, infer ? &dn->fwd_infer : &dn->fwd));
    }
    OK(run(n, &d->to_logits));
    TRY(dnnl_stream_wait(d->strm));
    return ST_OK;
}

static st_status onednn_set_last_diff(st_net *n, const float *plain)
{
    struct onednn_net *d = dn_net(n);
    TRY(dnnl_memory_set_data_handle(d->dlast_user, (void *)plain));
    return run(n, &d->from_dlast);
}

static st_status onednn_backward(st_net *n)
{
    for (int j = n->nx - 1; j >= 1; j--) {
        OK(run(n, &dn_state(&n->x[j])->bwd));
        if (n->grads_ready && n->x[j].nd->w_count) {
            TRY(dnnl_stream_wait(dn_net(n)->strm));  /* CPU streams run in order; be sure */
            nn_grads_ready(n, j);
        }
    }
    TRY(dnnl_stream_wait(dn_net(n)->strm));
    return ST_OK;
}

static st_status onednn_input_grad(st_net *n, float *out)
{
    const struct xnode *x = &n->x[0];
    memcpy(out, dn_mem_ptr(dn_state(x)->diff.mem), dnnl_memory_desc_get_size(dn_state(x)->diff.md));
    return ST_OK;
}

static void onednn_destroy(st_net *n)
{
    struct onednn_net *d = dn_net(n);
    for (int j = 0; n->x && j < n->nx; j++) {
        struct onednn_node *dn = dn_state(&n->x[j]);
        if (!dn)
            continue;
        free(dn->fwd.v);
        free(dn->fwd_infer.v);
        free(dn->bwd.v);
        free(dn->dropout.mask_scale);
        free(dn->pool.arg);
        dn_seq_free(&dn->seq);
        dn_head_free(&dn->head);
        free(dn);
    }
    if (!d)
        return;
    for (int i = 0; i < d->nprims; i++)
        dnnl_primitive_destroy(d->prims[i]);
    for (int i = 0; i < d->npds; i++)
        dnnl_primitive_desc_destroy(d->pds[i]);
    for (int i = 0; i < d->nmems; i++)
        dnnl_memory_destroy(d->mems[i]);
    for (int i = 0; i < d->nmds; i++)
        dnnl_memory_desc_destroy(d->mds[i]);
    if (d->strm)
        dnnl_stream_destroy(d->strm);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    free(d->mems);
    free(d->prims);
    free(d->pds);
    free(d->mds);
    free(d->to_logits.v);
    free(d->from_dlast.v);
    free(d->transposed);
    free(d->head_scratch);
    dn_attention_free(d);
    dn_diffs_free(d);
    free(d);
}

static st_status onednn_backward_from(st_net *n, const float *d_output)
{
    if (n->fused_loss)
        dn_head_take_gradient(n, d_output);
    else
        OK(onednn_set_last_diff(n, d_output));
    return onednn_backward(n);
}

const struct nn_backend nn_onednn_backend = {
    .name = "onednn",
    .computes = onednn_computes,
    .takes = onednn_takes,
    .build = onednn_build,
    .forward = onednn_forward,
    .backward_from = onednn_backward_from,
    .input_grad = onednn_input_grad,
    .destroy = onednn_destroy,
    .loss = dn_head_loss,
    .output = dn_head_output,
    .gradient_memory = dn_gradient_memory,
};
