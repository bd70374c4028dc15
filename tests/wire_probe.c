/* A program for tests/fp16_numpy.py: one all-reduce over forked ranks, its
 * inputs and outputs as raw files, so numpy can say what the bits must be.
 *
 *   st-wire-probe IN OUT WORLD COUNT DTYPE WIRE OP
 *
 * IN holds WORLD rows of COUNT elements of DTYPE (rank r's is row r); each
 * rank reduces its row with st_allreduce(DTYPE, WIRE, OP: sum, avg, max)
 * through a 16 KiB staging area (so 20,000 elements go in pieces) and
 * writes the result to OUT.<rank>.  Exits 0 when every rank did. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forkranks.h"
#include "shmtrain/dtype.h"

struct probe {
    const char *in, *out;
    size_t count;
    st_dtype dtype, wire;
    st_reduce_op op;
};

static int rank_main(st_group *g, int rank, void *arg)
{
    const struct probe *p = arg;
    const size_t bytes = p->count * st_dtype_size(p->dtype);
    char *buf = malloc(bytes ? bytes : 1), name[4096];
    FILE *f = fopen(p->in, "rb");
    CHILD_CHECK(buf && f);
    CHILD_CHECK(fseek(f, (long)(bytes * (size_t)rank), SEEK_SET) == 0 && fread(buf, 1, bytes, f) == bytes);
    fclose(f);
    CHILD_CHECK(st_allreduce(g, buf, p->count, p->dtype, p->wire, p->op) == ST_OK);
    snprintf(name, sizeof name, "%s.%d", p->out, rank);
    CHILD_CHECK((f = fopen(name, "wb")) != NULL);
    CHILD_CHECK(fwrite(buf, 1, bytes, f) == bytes && fclose(f) == 0);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    struct probe p = {0};
    const char *ops[] = {[ST_SUM] = "sum", [ST_AVG] = "avg", [ST_MAX] = "max"};
    if (argc != 8 || !st_dtype_parse(argv[5], &p.dtype) || !st_dtype_parse(argv[6], &p.wire)) {
        fprintf(stderr, "usage: st-wire-probe IN OUT WORLD COUNT DTYPE WIRE sum|avg|max\n");
        return 2;
    }
    p.in = argv[1], p.out = argv[2], p.count = strtoul(argv[4], NULL, 10);
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (ops[i] && !strcmp(argv[7], ops[i]))
            p.op = (st_reduce_op)i;
    if (strcmp(argv[7], ops[p.op] ? ops[p.op] : "")) {
        fprintf(stderr, "st-wire-probe: op '%s': use sum, avg or max\n", argv[7]);
        return 2;
    }
    char job[64];
    test_job_id(job, sizeof job, "wire-probe");
    st_group_config cfg = {.job_id = job, .staging_bytes = 16384};
    return run_ranks(atoi(argv[3]), &cfg, rank_main, &p) == 0 ? 0 : 1;
}
