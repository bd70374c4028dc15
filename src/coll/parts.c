/* What every algorithm and the public collectives stand on: a peer's
 * segment, the stage between an all-reduce's halves, the fp32 scratch and
 * the rounding a staged or rounded call ends with, the check of a payload,
 * and the progress a completed call shows the launcher.  Below coll.c and
 * every algorithm (coll_internal.h declares them). */
#define _GNU_SOURCE
#include <stdlib.h>

#include "coll_internal.h"
#include "shmtrain/bf16.h"

st_status coll_run_stage(const struct coll_stage *sg, float *part, size_t n, st_reduce_op op)
{
    st_status st = n ? sg->fn(sg->ctx, part, n) : ST_OK;
    if (st == ST_OK && op == ST_AVG)
        for (size_t i = 0; i < n; i++)
            part[i] /= sg->divisor;
    return st;
}

float *coll_scratch_f32(st_group *g, size_t n)
{
    if (n == 0)
        n = 1;  /* a slice may be empty; its scratch still exists */
    if (n > g->stage_f32_len) {
        float *p = realloc(g->stage_f32, n * sizeof *p);
        if (!p)
            return NULL;
        g->stage_f32 = p;
        g->stage_f32_len = n;
    }
    return g->stage_f32;
}

st_status coll_finish_rounded(st_group *g, float *sums, void *out, st_dtype wire, size_t n, st_reduce_op op,
                              const struct coll_stage *sg)
{
    if (sg) {
        st_status st = coll_run_stage(sg, sums, n, op);
        if (st != ST_OK)
            return st;
    } else if (op == ST_AVG) {
        for (size_t i = 0; i < n; i++)
            sums[i] /= (float)g->world;
    }
    st_dtype_convert_n(out, wire, sums, ST_DTYPE_F32, n);
    return ST_OK;
}

char *coll_seg_at(const st_group *g, int q, size_t off)
{
    return (char *)g->segs[q].base + off;
}

static bool floating(st_dtype t)
{
    return t == ST_DTYPE_F32 || t == ST_DTYPE_BF16 || t == ST_DTYPE_F16 || t == ST_DTYPE_F64;
}

st_status coll_check_payload(st_dtype t, st_reduce_op op)
{
    if (op != ST_SUM && op != ST_AVG && op != ST_MAX && op != ST_MIN)
        return st_fail(ST_ERR_INVALID, "coll: allreduce: unknown reduce op %d", (int)op);
    if (!floating(t) && t != ST_DTYPE_I32 && t != ST_DTYPE_I64)
        return st_fail(ST_ERR_INVALID, "coll: allreduce: element type %d is not fp32, bf16, fp16, fp64, i32 or i64",
                       (int)t);
    if (op == ST_AVG && !floating(t))
        return st_fail(ST_ERR_INVALID, "coll: allreduce: an average of %s (integers): use SUM and divide",
                       st_dtype_name(t));
    return ST_OK;
}

/* A collective that completed is progress the launcher can see. */
st_status coll_progressed(st_group *g, st_status st)
{
    if (st == ST_OK)
        st_heartbeat_beat(&g->hb, coll_coarse_now_s());
    return st;
}
