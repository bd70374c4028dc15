/* The trainer's gradient exchange end to end: bf16 and fp16 on the wire
 * (--allreduce-dtype), buckets overlapped with the backward pass
 * (--bucket-mb), and the hierarchical all-reduce over simulated nodes under
 * mpirun (the same bits as one node; a killed rank stops every node). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainrun.h"
#include "shmtrain/ckpt.h"

/* --allreduce-dtype bf16: the gradients travel rounded to bf16 (summed in
 * fp32), replicas stay bitwise identical, training still learns, and the
 * result is near, not equal to, fp32's (it did run in bf16).  In buckets
 * (--bucket-mb) it is the same to the bit: each element is rounded, summed
 * in rank order and rounded once whichever bucket carries it. */
static void test_bf16_gradient_exchange(void **state)
{
    (void)state;
    char *common[] = {"--batch-size", "32", "--max-steps", "200", "--check-replicas", "20", "--log-every", "50",
                      NULL};
    char *bf[16], *fp[16];
    int k = 0;
    for (; common[k]; k++)
        bf[k] = fp[k] = common[k];
    bf[k] = "--allreduce-dtype";
    bf[k + 1] = "bf16";
    bf[k + 2] = NULL;
    fp[k] = NULL;
    struct child_run b = train(2, "bf16.ckpt", bf, 0);
    if (b.code != 0)
        fail_msg("bf16 exchange failed: %s", b.err);
    bf[k + 2] = "--bucket-mb";
    bf[k + 3] = "0.05";
    bf[k + 4] = NULL;
    struct child_run bb = train(2, "bf16-buckets.ckpt", bf, 0);
    if (bb.code != 0)
        fail_msg("bf16 exchange in buckets failed: %s", bb.err);
    st_ckpt cbb = read_ckpt("bf16-buckets.ckpt"), cb0 = read_ckpt("bf16.ckpt");
    assert_int_equal(cbb.nparams, cb0.nparams);
    if (memcmp(cbb.params, cb0.params, cb0.nparams * sizeof(float)) != 0)
        fail_msg("bf16 in buckets: the parameters differ from the unbucketed bf16 run's");
    st_ckpt_free(&cbb);
    st_ckpt_free(&cb0);
    child_run_free(&bb);
    struct child_run f = train(2, "fp32.ckpt", fp, 0);
    assert_int_equal(f.code, 0);
    char path[512];
    path_of(path, sizeof path, "metrics.jsonl");
    char *m = slurp_or_empty(path);  /* the last run's (fp32) */
    assert_non_null(strstr(m, "\"allreduce_dtype\":\"fp32\""));
    free(m);
    st_ckpt cb = read_ckpt("bf16.ckpt"), cf = read_ckpt("fp32.ckpt");
    double scale, worst = ckpt_max_abs_diff(&cb, &cf, &scale);
    /* bf16 keeps 8 bits: each step's gradient moves by up to 2^-9 of itself,
     * and 200 steps of lr 0.05 add it up; equal bits would mean no bf16. */
    if (!(worst > 0 && worst < 0.05 * scale))
        fail_msg("bf16 vs fp32 parameters differ by %.3g (scale %.3g)", worst, scale);
    if (!(cb.best_accuracy > 0.8))
        fail_msg("bf16 exchange reached only %.3f test accuracy", cb.best_accuracy);
    st_ckpt_free(&cb);
    st_ckpt_free(&cf);
    child_run_free(&b);
    child_run_free(&f);
}

/* --allreduce-dtype fp16: the second rounding wire, by the same path as
 * bf16's (its bits against numpy's float16 are tests/fp16_numpy.py's): in
 * buckets the same parameters to the bit, recorded as fp16, still learning,
 * and nearer fp32's than bf16's run is (fp16 keeps 11 bits to bf16's 8, and
 * a gradient of this mlp never comes near fp16's 65504). */
static void test_fp16_gradient_exchange(void **state)
{
    (void)state;
    char *args[] = {"--batch-size", "32", "--max-steps", "200", "--check-replicas", "20", "--log-every", "50",
                    "--allreduce-dtype", "fp16", NULL, NULL, NULL};
    struct child_run h = train(2, "fp16.ckpt", args, 0);
    if (h.code != 0)
        fail_msg("fp16 exchange failed: %s", h.err);
    char path[512];
    path_of(path, sizeof path, "metrics.jsonl");
    char *m = slurp_or_empty(path);
    assert_non_null(strstr(m, "\"allreduce_dtype\":\"fp16\""));
    free(m);
    args[10] = "--bucket-mb", args[11] = "0.05";
    struct child_run hb = train(2, "fp16-buckets.ckpt", args, 0);
    if (hb.code != 0)
        fail_msg("fp16 exchange in buckets failed: %s", hb.err);
    st_ckpt c = read_ckpt("fp16.ckpt"), cb = read_ckpt("fp16-buckets.ckpt"), cf = read_ckpt("fp32.ckpt"),
            c16 = read_ckpt("bf16.ckpt");
    if (memcmp(c.params, cb.params, c.nparams * sizeof(float)) != 0)
        fail_msg("fp16 in buckets: the parameters differ from the unbucketed fp16 run's");
    double scale, from_fp32 = ckpt_max_abs_diff(&c, &cf, &scale), bf16_from_fp32 = ckpt_max_abs_diff(&c16, &cf, &scale);
    if (!(from_fp32 > 0 && from_fp32 < bf16_from_fp32))
        fail_msg("fp16 vs fp32 parameters differ by %.3g, bf16's by %.3g", from_fp32, bf16_from_fp32);
    if (!(c.best_accuracy > 0.8))
        fail_msg("fp16 exchange reached only %.3f test accuracy", c.best_accuracy);
    st_ckpt_free(&c), st_ckpt_free(&cb), st_ckpt_free(&cf), st_ckpt_free(&c16);
    child_run_free(&h), child_run_free(&hb);
}

/* --bucket-mb: the gradients go in buckets during backward, on a progress
 * thread.  With two ranks each element is one addition whatever the
 * buckets, so the result must equal the unbucketed one to the bit; with
 * three (oversubscribed) the buckets change the ring's order: replicas stay
 * identical and the result stays close. */
static void test_bucketed_overlap(void **state)
{
    (void)state;
    char *plain[] = {"--batch-size", "32", "--max-steps", "60", "--check-replicas", "10", NULL};
    char *buckets[] = {"--batch-size", "32", "--max-steps", "60", "--check-replicas", "10", "--bucket-mb", "0.05",
                       NULL};
    struct child_run a = train(2, "plain.ckpt", plain, 0);
    assert_int_equal(a.code, 0);
    st_ckpt ca = read_ckpt("plain.ckpt");
    /* 0.05 MB: every layer fills a bucket as it finishes; 2 MB: the whole
     * model (0.94 MB) goes as the one bucket left when backward ends. */
    const char *sizes[] = {"0.05", "2"};
    for (int i = 0; i < 2; i++) {
        buckets[7] = (char *)sizes[i];
        struct child_run b = train(2, "buckets.ckpt", buckets, 0);
        if (b.code != 0)
            fail_msg("--bucket-mb %s: exit %d: %s", sizes[i], b.code, b.err);
        st_ckpt cb = read_ckpt("buckets.ckpt");
        assert_int_equal(ca.nparams, cb.nparams);
        if (memcmp(ca.params, cb.params, ca.nparams * sizeof(float)) != 0)
            fail_msg("--bucket-mb %s: the parameters differ from the unbucketed run's", sizes[i]);
        st_ckpt_free(&cb);
        child_run_free(&b);
    }
    st_ckpt_free(&ca);
    child_run_free(&a);
    struct data_files d = synthetic_files();
    char *argv[] = {(char *)tr_shmrun, "-n", "3", "--oversubscribe", "--quiet", "--log-dir", "logs", "--",
                    (char *)tr_shmtrain, "--model", "mlp", "--train-images", d.tri, "--train-labels", d.trl,
                    "--test-images", d.tei, "--test-labels", d.tel, "--quiet", "--batch-size", "32", "--max-steps",
                    "60", "--check-replicas", "10", "--bucket-mb", "0.05", "--checkpoint", "b3.ckpt", NULL};
    struct child_run c = run_argv(argv, 0);
    if (c.code != 0)
        fail_msg("3 ranks with buckets: %s", c.err);
    child_run_free(&c);
}

/* ---------------------------------------------------------- across nodes -- */

/* mpirun [simulated nodes of node_size ranks] shmtrain <synthetic data> <extra...> */
static pid_t start_mpi(int ranks, int node_size, const char *job, char *const extra[], const char *tag)
{
    const char *mpiexec = getenv("MPIEXEC");
    char np[8], nodes[48], jobvar[96], out[512], err[512];
    snprintf(np, sizeof np, "%d", ranks);
    snprintf(nodes, sizeof nodes, "SHMTRAIN_NODE_SIZE=%d", node_size);
    snprintf(jobvar, sizeof jobvar, "SHMTRAIN_JOB_ID=%s", job);
    struct data_files d = synthetic_files();
    const char *base[] = {mpiexec, "--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader", "--mca",
                          "btl_vader_single_copy_mechanism", "none", "-x", nodes, "-x", jobvar,
                          /* Open MPI keeps allocations past MPI_Finalize: see tests/CMakeLists.txt */
                          "-x", "ASAN_OPTIONS=detect_leaks=0",
                          /* a core's worth of threads each, as shmrun gives and --print-mpirun
                           * says: Open MPI 5 binds nothing under --oversubscribe (4.1 did), and
                           * a product split over 2 threads sums in another order */
                          "-x", "OMP_NUM_THREADS=1", "-np", np,
                          tr_shmtrain, "--model", "mlp", "--train-images", d.tri, "--train-labels", d.trl,
                          "--test-images", d.tei, "--test-labels", d.tel, "--quiet"};
    char *argv[64];
    int k = 0;
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        argv[k++] = (char *)base[i];
    for (int i = 0; extra[i]; i++)
        argv[k++] = extra[i];
    argv[k] = NULL;
    snprintf(out, sizeof out, "%s/%s.out", tr_dir, tag);
    snprintf(err, sizeof err, "%s/%s.err", tr_dir, tag);
    return spawn_redirected(argv, tr_dir, out, err);
}

/* Two simulated nodes of one rank each, joined over MPI, train as one node
 * of two ranks over shared memory: the same sums in the same order, so the
 * same bits after 50 steps (the issue asks round-off; it is exact). */
static void test_two_nodes_equal_one_node_of_two(void **state)
{
    (void)state;
    if (!getenv("MPIEXEC")) {
        printf("skipped: built without MPI (install libopenmpi-dev)\n");
        skip();
    }
    char *common[] = {"--batch-size", "16", "--max-steps", "50", "--checkpoint", "nodes.ckpt", "--metrics",
                      "nodes.jsonl", "--check-replicas", "10", NULL};
    pid_t pid = start_mpi(2, 1, "twonodes", common, "mpi2x1");
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char path[512];
    snprintf(path, sizeof path, "%s/mpi2x1.err", tr_dir);
    char *err = slurp_or_empty(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("mpirun 2 nodes x 1 failed: %s", err);
    free(err);
    struct child_run one = train(2, "node.ckpt", (char *[]){"--batch-size", "16", "--max-steps", "50", NULL}, 0);
    if (one.code != 0)
        fail_msg("1 node x 2 failed: %s", one.err);
    st_ckpt a = read_ckpt("nodes.ckpt"), b = read_ckpt("node.ckpt");
    assert_int_equal(a.step, 50);
    assert_int_equal(a.world_size, 2);
    assert_int_equal(a.nparams, b.nparams);
    assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));
    st_ckpt_free(&a);
    st_ckpt_free(&b);
    child_run_free(&one);
    /* The bf16 exchange too: fp32 sums across the nodes, one rounding. */
    char *bf16[] = {"--batch-size", "16", "--max-steps", "50", "--checkpoint", "nodes16.ckpt", "--metrics",
                    "nodes16.jsonl", "--check-replicas", "10", "--allreduce-dtype", "bf16", NULL};
    pid = start_mpi(2, 1, "twonodes16", bf16, "mpi2x1bf16");
    assert_int_equal(waitpid(pid, &status, 0), pid);
    snprintf(path, sizeof path, "%s/mpi2x1bf16.err", tr_dir);
    err = slurp_or_empty(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("mpirun 2 nodes x 1, bf16 exchange, failed: %s", err);
    free(err);
    one = train(2, "node16.ckpt", (char *[]){"--batch-size", "16", "--max-steps", "50", "--allreduce-dtype", "bf16",
                                            NULL}, 0);
    assert_int_equal(one.code, 0);
    a = read_ckpt("nodes16.ckpt");
    b = read_ckpt("node16.ckpt");
    assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));
    st_ckpt_free(&a);
    st_ckpt_free(&b);
    child_run_free(&one);
    assert_int_equal(leftover_segments("twonodes"), 0);
}

/* --balance dynamic across nodes: each node takes its own ranks'
 * micro-batches (2 simulated nodes of 2 ranks, 2 micro-batches each), so
 * the run trains as one node of 4 under static balance, to round-off (the
 * same sums in another order: 1e-5 of the parameters' scale, as
 * test_balance), every micro-batch counted once. */
static void test_dynamic_balance_inside_each_node(void **state)
{
    (void)state;
    if (!getenv("MPIEXEC")) {
        printf("skipped: built without MPI (install libopenmpi-dev)\n");
        skip();
    }
    char *dyn[] = {"--batch-size", "8", "--grad-accum", "2", "--balance", "dynamic", "--max-steps", "20",
                   "--checkpoint", "dyn.ckpt", "--metrics", "dyn.jsonl", "--check-replicas", "5", NULL};
    pid_t pid = start_mpi(4, 2, "dynnodes", dyn, "mpidyn");
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char path[512];
    snprintf(path, sizeof path, "%s/mpidyn.err", tr_dir);
    char *err = slurp_or_empty(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("mpirun 2 nodes x 2, --balance dynamic, failed: %s", err);
    free(err);
    snprintf(path, sizeof path, "%s/dyn.jsonl", tr_dir);
    char *records = slurp_or_empty(path);
    assert_non_null(strstr(records, "\"micro_batches\":160,"));  /* 20 steps x 4 ranks x 2 */
    assert_non_null(strstr(records, "\"balance\":\"dynamic\""));
    free(records);
    struct child_run one = train(4, "stat.ckpt", (char *[]){"--batch-size", "8", "--grad-accum", "2", "--max-steps",
                                                          "20", NULL}, 0);
    if (one.code != 0)
        fail_msg("1 node x 4 failed: %s", one.err);
    st_ckpt a = read_ckpt("dyn.ckpt"), b = read_ckpt("stat.ckpt");
    assert_int_equal(a.step, 20);
    double scale, worst = ckpt_max_abs_diff(&a, &b, &scale);
    if (!(worst <= 1e-5 * scale))
        fail_msg("2 nodes x 2 dynamic against 1 x 4 static: parameters apart by %.3g of %.3g", worst, scale);
    st_ckpt_free(&a);
    st_ckpt_free(&b);
    child_run_free(&one);
    assert_int_equal(leftover_segments("dynnodes"), 0);
}

/* Ranks on two NUMA nodes (as a launcher places them on a 2-socket server;
 * here said by SHMTRAIN_NUMA_NODES, the instances started by hand under
 * torchrun's names): the first rank of the second node copies the decoded
 * data for its node, which then reads it there, and training gives the
 * bits of the one-copy run; nothing is left in /dev/shm. */
static void test_data_copied_per_numa_node(void **state)
{
    (void)state;
    struct data_files d = synthetic_files();
    const char *job = "numacopy";
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        char rank[8], out[512], err[512];
        snprintf(rank, sizeof rank, "%d", r);
        setenv("RANK", rank, 1);
        setenv("LOCAL_RANK", rank, 1);
        setenv("WORLD_SIZE", "2", 1);
        setenv("LOCAL_WORLD_SIZE", "2", 1);
        setenv("SHMTRAIN_JOB_ID", job, 1);
        setenv("SHMTRAIN_NUMA_NODES", rank, 1);
        setenv("OMP_NUM_THREADS", "1", 1);
        snprintf(out, sizeof out, "%s/numa%d.out", tr_dir, r);
        snprintf(err, sizeof err, "%s/numa%d.err", tr_dir, r);
        char *argv[] = {(char *)tr_shmtrain, "--model", "mlp", "--train-images", d.tri, "--train-labels", d.trl,
                        "--test-images", d.tei, "--test-labels", d.tel, "--batch-size", "16", "--max-steps", "30",
                        "--checkpoint", "numa.ckpt", "--metrics", "numa.jsonl", "--check-replicas", "10", NULL};
        pids[r] = spawn_redirected(argv, tr_dir, out, err);
        assert_true(pids[r] > 0);
    }
    const char *vars[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SHMTRAIN_JOB_ID",
                          "SHMTRAIN_NUMA_NODES", "OMP_NUM_THREADS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    for (int r = 0; r < 2; r++) {
        char out[512], err[512];
        snprintf(out, sizeof out, "%s/numa%d.out", tr_dir, r);
        snprintf(err, sizeof err, "%s/numa%d.err", tr_dir, r);
        struct child_run run = child_collect(pids[r], out, err);
        if (run.code != 0)
            fail_msg("rank %d on NUMA node %d: exit %d: %s", r, r, run.code, run.err);
        /* rank 1 made node 1's copy; rank 0, the publisher, none */
        assert_int_equal(strstr(run.out, "the decoded data copied to NUMA node 1") != NULL, r == 1);
        child_run_free(&run);
    }
    struct child_run one = train(2, "onecopy.ckpt", (char *[]){"--batch-size", "16", "--max-steps", "30", NULL}, 0);
    if (one.code != 0)
        fail_msg("one copy: %s", one.err);
    st_ckpt a = read_ckpt("numa.ckpt"), b = read_ckpt("onecopy.ckpt");
    assert_int_equal(a.step, 30);
    assert_int_equal(a.nparams, b.nparams);
    assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));
    st_ckpt_free(&a);
    st_ckpt_free(&b);
    child_run_free(&one);
    assert_int_equal(leftover_segments(job), 0);
}

/* A rank of one node killed mid-run: every process of every node exits
 * within seconds, and nothing stays in /dev/shm. */
static void test_killed_rank_stops_every_node(void **state)
{
    (void)state;
    if (!getenv("MPIEXEC")) {
        printf("skipped: built without MPI (install libopenmpi-dev)\n");
        skip();
    }
    char path[512];
    path_of(path, sizeof path, "kill.jsonl");
    unlink(path);
    pid_t pid = start_mpi(4, 2, "killnode", (char *[]){"--epochs", "50", "--metrics", "kill.jsonl", "--checkpoint",
                                                        "kill.ckpt", "--log-every", "5", NULL}, "mpikill");
    wait_for_text("kill.jsonl", "\"type\":\"train\"");
    /* The ranks are mpirun's children; the last started is rank 3 (node 1). */
    char cmd[128], line[64];
    snprintf(cmd, sizeof cmd, "pgrep -P %d -n shmtrain", (int)pid);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    pid_t victim = fgets(line, sizeof line, p) ? (pid_t)atoi(line) : 0;
    pclose(p);
    assert_true(victim > 0);
    double t0 = mono_now();
    assert_int_equal(kill(victim, SIGKILL), 0);
    int status;
    pid_t got;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && mono_now() - t0 < 30)
        usleep(50 * 1000);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fail_msg("mpirun still ran 30 s after a rank was killed");
    }
    double took = mono_now() - t0;
    assert_true(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
    snprintf(cmd, sizeof cmd, "pgrep -f 'shmtrai[n] .*kill.jsonl' >/dev/null");  /* [n]: not this shell */
    assert_int_not_equal(system(cmd), 0);  /* no rank of any node is left */
    assert_int_equal(leftover_segments("killnode"), 0);
    printf("mpirun out %.2f s after the kill\n", took);
}


int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_gradient_exchange),
        cmocka_unit_test(test_fp16_gradient_exchange),  /* after bf16's: reads its and fp32's checkpoints */
        cmocka_unit_test(test_bucketed_overlap),
        cmocka_unit_test(test_two_nodes_equal_one_node_of_two),
        cmocka_unit_test(test_dynamic_balance_inside_each_node),
        cmocka_unit_test(test_killed_rank_stops_every_node),
        cmocka_unit_test(test_data_copied_per_numa_node),
    };
    return TRAINRUN_GROUP("test_exchange", tests, argc, argv);
}
