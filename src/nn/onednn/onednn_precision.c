/* The plan as the builders read it: what a node keeps (x->stored, planned
 * by precision.c for every backend before any builder runs) and the one
 * mapping from the plan's types to oneDNN's; builders decide nothing (a
 * layer with no kernel in its planned type says so: nn_plan_fallback). */
#define _GNU_SOURCE
#include "onednn_internal.h"

bool dn_output_lowp(const st_net *n, int j) { return n->x[j].stored != ST_DTYPE_F32; }

dnnl_data_type_t dn_type_of(st_dtype t)
{
    switch (t) {
    case ST_DTYPE_BF16: return dnnl_bf16;
    case ST_DTYPE_F16: return dnnl_f16;
    case ST_DTYPE_I32: return dnnl_s32;
    default: return dnnl_f32;
    }
}

dnnl_data_type_t dn_dst_type(const st_net *n, int j) { return dn_md_type(dn_state(&n->x[j])->dst.md); }
