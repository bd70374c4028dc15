/* The launcher contract (include/shmtrain/env.h): shmrun's, Open MPI's,
 * Slurm's and torchrun's variables give the same placement, and incomplete
 * or contradictory ones are a one-line error naming them. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "shmtrain/coll.h"
#include "shmtrain/env.h"

static const char *const ALL[] = {
    ST_ENV_RANK, ST_ENV_WORLD_SIZE, ST_ENV_LOCAL_RANK, ST_ENV_LOCAL_WORLD_SIZE, ST_ENV_OMPI_RANK,
    ST_ENV_OMPI_WORLD_SIZE, ST_ENV_OMPI_LOCAL_RANK, ST_ENV_OMPI_LOCAL_SIZE, ST_ENV_SLURM_RANK,
    ST_ENV_SLURM_WORLD_SIZE, ST_ENV_SLURM_LOCAL_RANK, ST_ENV_SLURM_NODE, ST_ENV_SLURM_NODES,
    ST_ENV_SLURM_TASKS_PER_NODE, ST_ENV_GENERIC_RANK, ST_ENV_GENERIC_WORLD_SIZE, ST_ENV_GENERIC_LOCAL_RANK,
    ST_ENV_GENERIC_LOCAL_WORLD_SIZE, ST_ENV_TORCH_NODE, ST_ENV_NODE_SIZE, ST_ENV_JOB_ID, ST_ENV_TORCH_JOB,
    ST_ENV_SLURM_JOB, ST_ENV_PMIX_JOB, ST_ENV_OMPI_JOB};

/* Clear every variable, then set the NULL-terminated name/value pairs. */
static void env(const char *first, ...)
{
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++)
        unsetenv(ALL[i]);
    va_list ap;
    va_start(ap, first);
    for (const char *k = first; k; k = va_arg(ap, const char *))
        setenv(k, va_arg(ap, const char *), 1);
    va_end(ap);
}

static st_placement placed(void)
{
    st_placement p;
    if (st_placement_from_env(&p) != ST_OK)
        fail_msg("unexpected error: %s", st_last_error());
    return p;
}

static void expect(const st_placement *p, const char *launcher, int rank, int world, int lrank, int lworld, int node,
                   int nodes)
{
    if (strcmp(p->launcher, launcher) || p->rank != rank || p->world != world || p->local_rank != lrank ||
        p->local_world != lworld || p->node != node || p->nodes != nodes)
        fail_msg("got %s rank %d/%d local %d/%d node %d/%d; wanted %s %d/%d %d/%d %d/%d", p->launcher, p->rank,
                 p->world, p->local_rank, p->local_world, p->node, p->nodes, launcher, rank, world, lrank, lworld,
                 node, nodes);
}

static void expect_error(const char *fragment)
{
    st_placement p;
    if (st_placement_from_env(&p) != ST_ERR_INVALID || !strstr(st_last_error(), fragment))
        fail_msg("wanted an error with '%s', got '%s'", fragment, st_last_error());
}

static void test_each_launcher(void **state)
{
    (void)state;
    env(NULL);
    st_placement p = placed();
    expect(&p, "none", 0, 1, 0, 1, 0, 1);
    env(ST_ENV_RANK, "2", ST_ENV_WORLD_SIZE, "4", ST_ENV_LOCAL_RANK, "2", ST_ENV_LOCAL_WORLD_SIZE, "4", NULL);
    p = placed();
    expect(&p, "shmrun", 2, 4, 2, 4, 0, 1);
    env(ST_ENV_OMPI_RANK, "5", ST_ENV_OMPI_WORLD_SIZE, "8", ST_ENV_OMPI_LOCAL_RANK, "1", ST_ENV_OMPI_LOCAL_SIZE, "4",
        NULL);
    p = placed();
    expect(&p, "mpirun", 5, 8, 1, 4, -1, -1);  /* Open MPI names no node index */
    env(ST_ENV_SLURM_RANK, "5", ST_ENV_SLURM_WORLD_SIZE, "8", ST_ENV_SLURM_LOCAL_RANK, "1", ST_ENV_SLURM_NODE, "1",
        ST_ENV_SLURM_NODES, "2", ST_ENV_SLURM_TASKS_PER_NODE, "4(x2)", NULL);
    p = placed();
    expect(&p, "srun", 5, 8, 1, 4, 1, 2);
    env(ST_ENV_SLURM_RANK, "7", ST_ENV_SLURM_WORLD_SIZE, "8", ST_ENV_SLURM_LOCAL_RANK, "4", ST_ENV_SLURM_NODE, "1",
        ST_ENV_SLURM_NODES, "2", ST_ENV_SLURM_TASKS_PER_NODE, "3,5", NULL);
    p = placed();
    expect(&p, "srun", 7, 8, 4, 5, 1, 2);
    env(ST_ENV_GENERIC_RANK, "3", ST_ENV_GENERIC_WORLD_SIZE, "4", ST_ENV_GENERIC_LOCAL_RANK, "1",
        ST_ENV_GENERIC_LOCAL_WORLD_SIZE, "2", ST_ENV_TORCH_NODE, "1", NULL);
    p = placed();
    expect(&p, "torchrun", 3, 4, 1, 2, 1, -1);
    /* shmrun's own torchrun names agree with its SHMTRAIN_* ones. */
    env(ST_ENV_RANK, "1", ST_ENV_WORLD_SIZE, "2", ST_ENV_GENERIC_RANK, "1", ST_ENV_GENERIC_WORLD_SIZE, "2", NULL);
    p = placed();
    expect(&p, "shmrun", 1, 2, 1, 2, 0, 1);
    /* shmrun started by a one-task srun or mpirun is fine. */
    env(ST_ENV_RANK, "3", ST_ENV_WORLD_SIZE, "4", ST_ENV_SLURM_RANK, "0", ST_ENV_SLURM_WORLD_SIZE, "1", NULL);
    p = placed();
    expect(&p, "shmrun", 3, 4, 3, 4, 0, 1);
}

/* The lifeline's "started by another launcher" and the run folder's job id
 * come from the same lists as the placement. */
/* The one reader: an empty variable is an unset one for every reader (a
 * user's `LOG_DIR=` names no folder), a bad number is refused by name and
 * leaves the field as it was. */
static void test_readers(void **state)
{
    (void)state;
    env(NULL);
    assert_null(st_env_text(ST_ENV_JOB_ID));
    setenv(ST_ENV_JOB_ID, "", 1);
    assert_null(st_env_text(ST_ENV_JOB_ID));
    assert_false(st_env_set(ST_ENV_JOB_ID));
    setenv(ST_ENV_JOB_ID, "job7", 1);
    assert_string_equal(st_env_text(ST_ENV_JOB_ID), "job7");
    assert_true(st_env_set(ST_ENV_JOB_ID));
    int n = 5;
    setenv(ST_ENV_RANK, "", 1);
    assert_true(st_env_int(ST_ENV_RANK, 0, &n) && n == 5);  /* empty: the field kept */
    setenv(ST_ENV_RANK, "3x", 1);
    assert_false(st_env_int(ST_ENV_RANK, 0, &n));
    assert_int_equal(n, 5);
    assert_non_null(strstr(st_last_error(), ST_ENV_RANK "='3x' is not a whole number"));
    setenv(ST_ENV_RANK, "3", 1);
    assert_true(st_env_int(ST_ENV_RANK, 0, &n) && n == 3);
    env(NULL);
}

static void test_other_launcher_and_job_id(void **state)
{
    (void)state;
    env(NULL);
    assert_null(st_env_other_launcher());
    assert_null(st_env_shared_job_id());
    env(ST_ENV_RANK, "0", ST_ENV_WORLD_SIZE, "2", NULL);  /* shmrun is not another launcher */
    assert_null(st_env_other_launcher());
    env(ST_ENV_SLURM_RANK, "1", ST_ENV_SLURM_JOB, "4242", NULL);
    assert_string_equal(st_env_other_launcher(), "srun");
    assert_string_equal(st_env_shared_job_id(), "4242");
    env(ST_ENV_GENERIC_RANK, "0", ST_ENV_TORCH_JOB, "none/of/this", ST_ENV_OMPI_JOB, "77", NULL);
    assert_string_equal(st_env_other_launcher(), "torchrun");
    assert_string_equal(st_env_shared_job_id(), "77");  /* a value with '/' cannot name a folder */
    env(ST_ENV_JOB_ID, "mine", ST_ENV_SLURM_JOB, "4242", NULL);
    assert_string_equal(st_env_shared_job_id(), "mine");  /* shmrun's first */
}

static void test_simulated_nodes(void **state)
{
    (void)state;
    env(ST_ENV_RANK, "3", ST_ENV_WORLD_SIZE, "4", ST_ENV_NODE_SIZE, "2", NULL);
    st_placement p = placed();
    expect(&p, "shmrun", 3, 4, 1, 2, 1, 2);
    env(ST_ENV_OMPI_RANK, "2", ST_ENV_OMPI_WORLD_SIZE, "4", ST_ENV_OMPI_LOCAL_RANK, "2", ST_ENV_OMPI_LOCAL_SIZE, "4",
        ST_ENV_NODE_SIZE, "1", NULL);
    p = placed();
    expect(&p, "mpirun", 2, 4, 0, 1, 2, 4);
    env(ST_ENV_RANK, "0", ST_ENV_WORLD_SIZE, "4", ST_ENV_NODE_SIZE, "3", NULL);
    expect_error("SHMTRAIN_NODE_SIZE=3 does not divide the world of 4 ranks");
    /* A shared-memory group cannot span nodes. */
    env(ST_ENV_RANK, "1", ST_ENV_WORLD_SIZE, "2", ST_ENV_NODE_SIZE, "1", ST_ENV_JOB_ID, "envtest", NULL);
    st_group_config cfg = {0};
    char job[ST_JOB_ID_MAX + 1];
    assert_int_equal(st_group_config_from_env(&cfg, job), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "a shared-memory group spans one node"));
    env(NULL);
}

static void test_incomplete_or_contradictory(void **state)
{
    (void)state;
    env(ST_ENV_OMPI_RANK, "1", NULL);
    expect_error("(mpirun): OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    env(ST_ENV_WORLD_SIZE, "2", NULL);
    expect_error("SHMTRAIN_WORLD_SIZE is set but SHMTRAIN_RANK is not");
    env(ST_ENV_RANK, "2", ST_ENV_WORLD_SIZE, "2", NULL);
    expect_error("SHMTRAIN_RANK=2 is not below SHMTRAIN_WORLD_SIZE=2");
    env(ST_ENV_RANK, "two", ST_ENV_WORLD_SIZE, "2", NULL);
    expect_error("SHMTRAIN_RANK='two' is not a whole number");
    env(ST_ENV_OMPI_RANK, "1", ST_ENV_OMPI_WORLD_SIZE, "4", ST_ENV_OMPI_LOCAL_RANK, "2", ST_ENV_OMPI_LOCAL_SIZE, "2",
        NULL);
    expect_error("local rank 2 of 2 does not fit");
    env(ST_ENV_SLURM_RANK, "1", ST_ENV_SLURM_WORLD_SIZE, "8", ST_ENV_SLURM_NODES, "2", ST_ENV_SLURM_NODE, "0", NULL);
    expect_error("no SLURM_TASKS_PER_NODE");
    env(ST_ENV_SLURM_RANK, "1", ST_ENV_SLURM_WORLD_SIZE, "8", ST_ENV_SLURM_NODE, "2", ST_ENV_SLURM_TASKS_PER_NODE,
        "4(x2)", NULL);
    expect_error("does not give node 2's task count");
    /* Malformed run-length lists were read as far as they made sense. */
    const char *malformed[] = {"2,,2", "2(x1),", ",2", "2(x0)", "2(1)", "2(x2", "4294967298", "2(x4294967298)", "-2",
                               "2x", "2(x2)3"};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
        env(ST_ENV_SLURM_RANK, "0", ST_ENV_SLURM_WORLD_SIZE, "2", ST_ENV_SLURM_NODE, "0", ST_ENV_SLURM_NODES, "1",
            ST_ENV_SLURM_TASKS_PER_NODE, malformed[i], NULL);
        expect_error("does not give node 0's task count");
    }
    env(ST_ENV_SLURM_RANK, "1", ST_ENV_SLURM_WORLD_SIZE, "8", ST_ENV_SLURM_NODE, "5", ST_ENV_SLURM_NODES, "2",
        ST_ENV_SLURM_TASKS_PER_NODE, "2(x6)", NULL);
    expect_error("SLURM_NODEID=5 is not below SLURM_NNODES=2");
    env(ST_ENV_SLURM_RANK, "0", ST_ENV_SLURM_WORLD_SIZE, "2", ST_ENV_SLURM_NODE, "1", ST_ENV_SLURM_NODES, "1", NULL);
    expect_error("SLURM_NODEID=1 is not below SLURM_NNODES=1");  /* the bound itself */
    env(ST_ENV_SLURM_RANK, "1", ST_ENV_SLURM_WORLD_SIZE, "8", ST_ENV_SLURM_NODE, "1", ST_ENV_SLURM_NODES, "2",
        ST_ENV_SLURM_TASKS_PER_NODE, "2(x6)", NULL);
    expect_error("lists 6 nodes, SLURM_NNODES=2");
    /* Found by fuzz_placement: a list of fewer tasks than the world. */
    env(ST_ENV_SLURM_RANK, "0", ST_ENV_SLURM_WORLD_SIZE, "2", ST_ENV_SLURM_NODES, "1", ST_ENV_SLURM_TASKS_PER_NODE, "1",
        NULL);
    expect_error("lists 1 tasks, SLURM_NTASKS=2");
    env(ST_ENV_SLURM_RANK, "0", ST_ENV_SLURM_WORLD_SIZE, "4", ST_ENV_SLURM_TASKS_PER_NODE, "2(x2)", NULL);
    expect_error("lists 2 nodes but SLURM_NODEID is not set");
    /* shmrun inside a multi-process MPI job: every process would start a gang. */
    env(ST_ENV_RANK, "1", ST_ENV_WORLD_SIZE, "4", ST_ENV_OMPI_RANK, "0", ST_ENV_OMPI_WORLD_SIZE, "2", NULL);
    expect_error("shmrun inside a job of 2 mpirun processes");
    /* shmrun's names beside torchrun's that disagree: which one ran? */
    env(ST_ENV_RANK, "0", ST_ENV_WORLD_SIZE, "1", ST_ENV_GENERIC_RANK, "1", ST_ENV_GENERIC_WORLD_SIZE, "2", NULL);
    expect_error("SHMTRAIN_RANK=0 SHMTRAIN_WORLD_SIZE=1 (shmrun) but RANK=1 WORLD_SIZE=2 (torchrun): the two");
    env(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers),
        cmocka_unit_test(test_each_launcher),
        cmocka_unit_test(test_other_launcher_and_job_id),
        cmocka_unit_test(test_simulated_nodes),
        cmocka_unit_test(test_incomplete_or_contradictory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
