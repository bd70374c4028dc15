/* The low-precision plan: what each layer kind does in a bf16 net (the
 * layer table's lowp column, each rule asked with the precision) and, from that, the type of every tensor edge, decided once
 * at plan time.  Builders read the verdicts (dn_output_bf16 for what they
 * write, their producer's memory for what they read) and decide nothing. */
#define _GNU_SOURCE
#include "onednn_internal.h"

#include "kernels/causal_bf16.h"

/* A convolution reading fewer channels than this stays fp32 in a bf16 net:
 * with one input channel oneDNN's bf16 kernels lose to its fp32 ones, on
 * AMX and on AVX512-BF16 alike, and three (RGB) already win, the whole stem
 * then carrying bf16 (docs/benchmarks.md, section 0c). */
#define BF16_MIN_CONV_CHANNELS 3

enum lowp_role lowp_never(const st_net *n, const struct xnode *x, st_dtype low)
{
    (void)n, (void)x, (void)low;
    return LOWP_NO;
}

/* oneDNN's kernels here compute in bf16; its fp16 ones (AVX512-FP16,
 * AMX-FP16) are not wired: an fp16 net would keep these layers fp32. */
enum lowp_role lowp_computes(const st_net *n, const struct xnode *x, st_dtype low)
{
    if (low != ST_DTYPE_BF16)
        return LOWP_NO;
    return x->kind != NODE_CONV || n->x[x->in].nd->c >= BF16_MIN_CONV_CHANNELS ? LOWP_COMPUTES : LOWP_NO;
}

enum lowp_role lowp_carries(const st_net *n, const struct xnode *x, st_dtype low)
{
    (void)n, (void)x, (void)low;
    return LOWP_CARRIES;
}

/* Layer norm computes in fp32 (its statistics need it) and writes bf16 for
 * bf16 consumers, as PyTorch's autocast keeps only the bf16 copy its linear
 * layer casts: the fp32 output and the conversion pass go (905 MB of gpt2
 * at batch 12).  Its output gradient is then bf16 too, as autocast's is.
 * oneDNN's layer norm (tuning.onednn_layernorm) stays fp32. */
enum lowp_role lowp_writes(const st_net *n, const struct xnode *x, st_dtype low)
{
    (void)x;
    return low == ST_DTYPE_BF16 && !n->cfg.tuning.onednn_layernorm ? LOWP_WRITES : LOWP_NO;
}

/* Attention's products in bf16 need the instruction itself: oneDNN's
 * emulation (bf16_any_isa) does not reach a C kernel. */
enum lowp_role lowp_inside(const st_net *n, const struct xnode *x, st_dtype low)
{
    (void)x;
    return low == ST_DTYPE_BF16 && causal_bf16_available() && !n->cfg.tuning.attention_fp32 ? LOWP_INSIDE : LOWP_NO;
}

/* Will node j's output be bf16, judged by the roles alone (not by its
 * consumers)?  For an add's other input, which may be built after the
 * layer asking. */
static bool could_be_bf16(const st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    switch (x->dn->lowp_role) {
    case LOWP_COMPUTES: return x->dn->bf16;
    case LOWP_CARRIES:
        return could_be_bf16(n, x->in) && (x->in2 < 0 || could_be_bf16(n, x->in2));
    default: return false;
    }
}

/* Does consumer c take node j's output in bf16 as it is? */
static bool takes_bf16(const st_net *n, const struct xnode *c, int j)
{
    switch (c->dn->lowp_role) {
    case LOWP_COMPUTES: return c->dn->bf16 && c->kind != NODE_HEAD;  /* the head rounds its rows per chunk */
    case LOWP_CARRIES:
        if (c->in2 < 0)
            return true;
        return could_be_bf16(n, c->in == j ? c->in2 : c->in);
    default: return false;
    }
}

bool dn_output_bf16(const st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    switch (x->dn->lowp_role) {
    case LOWP_COMPUTES:
    case LOWP_WRITES:
        if ((!x->dn->bf16 && x->dn->lowp_role == LOWP_COMPUTES) || x->consumers == 0)
            return false;
        for (int c = j + 1; c < n->nx; c++)
            if ((n->x[c].in == j || n->x[c].in2 == j) && !takes_bf16(n, &n->x[c], j))
                return false;
        return true;
    case LOWP_CARRIES:
        return dn_dst_type(n, x->in) == dnnl_bf16 && (x->in2 < 0 || dn_dst_type(n, x->in2) == dnnl_bf16);
    default: return false;
    }
}

dnnl_data_type_t dn_dst_type(const st_net *n, int j)
{
    dnnl_data_type_t dt = dnnl_f32;
    const_dnnl_memory_desc_t md = n->x[j].dn->dst.md;
    if (md)
        dnnl_memory_desc_query(md, dnnl_query_data_type, &dt);
    return dt;
}

/* Each node's output and compute type from the roles alone, in order (a
 * carrier's input is planned before it): what the builders would make,
 * for a plan that builds nothing. */
void dn_plan_precision(st_net *n)
{
    for (int j = 0; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        bool out = false;
        if (x->dn->lowp_role == LOWP_CARRIES)
            out = n->x[x->in].stored == ST_DTYPE_BF16 && (x->in2 < 0 || n->x[x->in2].stored == ST_DTYPE_BF16);
        else if (j > 0)
            out = dn_output_bf16(n, j);
        x->stored = out ? ST_DTYPE_BF16 : ST_DTYPE_F32;
        x->compute = x->dn->bf16 || (x->dn->lowp_role == LOWP_CARRIES && out) ? ST_DTYPE_BF16 : ST_DTYPE_F32;
    }
}
