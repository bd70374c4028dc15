/* The bf16 plan as built: the verdicts the builders read (dn_output_lowp
 * for what they write, their producer's memory for what they read), from
 * the roles precision.c assigned for every backend; builders decide
 * nothing. */
#define _GNU_SOURCE
#include "onednn_internal.h"

bool dn_output_lowp(const st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    if (x->lowp_role == LOWP_CARRIES)
        return dn_dst_type(n, x->in) == dnnl_bf16 && (x->in2 < 0 || dn_dst_type(n, x->in2) == dnnl_bf16);
    return nn_consumers_take_lowp(n, j);
}

dnnl_data_type_t dn_dst_type(const st_net *n, int j) { return dn_md_type(n->x[j].dn->dst.md); }
