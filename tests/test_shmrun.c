/* shmrun end to end: golden --dry-run plans, the environment and binding the
 * instances see, Ctrl-C, oversubscribed gangs, mpirun's rankfile, what a
 * rank inherits, bad flags.  Failing and stalled ranks: test_shmrun_faults.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmrun_fixture.h"

/* ------------------------------------------------------------- golden -- */

static void check_golden(const char *name, char *const args[])
{
    char *argv[32] = {(char *)shmrun, "--dry-run"};
    int n = 2;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    struct result r = run(argv, name);
    assert_int_equal(exit_code(&r), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.txt", golden_dir, name);
    if (getenv("UPDATE_GOLDEN")) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(r.out, f);
        fclose(f);
    }
    char *want = slurp(path);
    if (!want)
        fail_msg("no golden file %s (run with UPDATE_GOLDEN=1)", path);
    if (strcmp(want, r.out) != 0)
        fail_msg("%s: plan differs from %s:\n--- got\n%s--- want\n%s", name, path, r.out, want);
    free(want);
    result_free(&r);
}

static void test_golden_plans(void **state)
{
    (void)state;
    check_golden("one-socket-2-cores", (char *[]){"--synthetic", "pack:1 numa:1 l3:1 core:2 pu:1", NULL});
    check_golden("two-sockets-default", (char *[]){"--synthetic", "pack:2 numa:2 l3:1 core:16 pu:2", NULL});
    check_golden("two-sockets-8x8", (char *[]){"--synthetic", "pack:2 numa:2 l3:1 core:16 pu:2", "-n", "8", NULL});
    check_golden("two-sockets-2x20-cross-numa",
                 (char *[]){"--synthetic", "pack:2 numa:2 l3:1 core:16 pu:2", "-n", "2", "-c", "20", NULL});
    check_golden("two-sockets-logical-4",
                 (char *[]){"--synthetic", "pack:2 numa:2 l3:1 core:16 pu:2", "-c", "4", "--use-logical-cores", NULL});
    check_golden("uneven-restricted",
                 (char *[]){"--synthetic", "pack:2 numa:1 core:4 pu:1", "--allowed-cpus", "0-6", "-c", "2", NULL});
    check_golden("sweep-two-sockets",
                 (char *[]){"--synthetic", "pack:2 numa:2 l3:2 core:8 pu:2", "--sweep", "core,l3,numa,4x8", "--repeats",
                            "2", "--compare-torch", NULL});
    check_golden("two-cores-oversubscribed-4",
                 (char *[]){"--synthetic", "pack:1 numa:1 l3:1 core:2 pu:1", "-n", "4", "--oversubscribe", NULL});
    check_golden("two-cores-oversubscribed-3x2",
                 (char *[]){"--synthetic", "pack:1 numa:1 l3:1 core:2 pu:1", "-n", "3", "-c", "2", "--oversubscribe",
                            NULL});
    check_golden("two-sockets-4-print-mpirun",
                 (char *[]){"--synthetic", "pack:2 numa:2 l3:1 core:16 pu:2", "-n", "4", "--hosts", "node1,node2",
                            "--print-mpirun", "--", "shmtrain", "--model", "cnn", "--lr", "0.1 x", NULL});
    check_golden("two-sockets-8x8-json",
                 (char *[]){"--synthetic", "pack:2 numa:2 l3:1 core:16 pu:2", "-n", "8", "--json", NULL});
}

/* ------------------------------------------------------------- launch -- */

static void test_environment_and_binding(void **state)
{
    (void)state;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 2)
        skip();
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--job-id", "envtest", "--log-dir", "logs",
                                     "--", (char *)probe, "--join", NULL},
                          "env");
    if (exit_code(&r) != 0)
        fail_msg("shmrun failed: %s", r.err);
    assert_non_null(strstr(r.err, "rank cores"));         /* the plan table */
    assert_non_null(strstr(r.out, "rank=0 world=2"));     /* rank 0 on the console */
    assert_null(strstr(r.out, "rank=1 world=2"));         /* rank 1 only in its log */
    for (int rank = 0; rank < 2; rank++) {
        char *log = rank_log("envtest", 0, rank);
        assert_non_null(log);
        char want[128];
        snprintf(want, sizeof want, "rank=%d world=2 local_rank=%d local_world=2 job=envtest cores=%d ",
                 rank, rank, rank);
        assert_non_null(strstr(log, want));
        snprintf(want, sizeof want, "RANK=%d WORLD_SIZE=2 LOCAL_RANK=%d OMP_NUM_THREADS=1 OMP_PLACES=cores "
                 "OMP_PROC_BIND=close", rank, rank);
        assert_non_null(strstr(log, want));
        snprintf(want, sizeof want, "affinity=%d\n", rank);  /* bound to exactly its core */
        assert_non_null(strstr(log, want));
        assert_non_null(strstr(log, "allreduce=ok x0=1"));
        free(log);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/logs/envtest/shmrun.log", workdir);
    char *launcher_log = slurp(path);
    assert_non_null(launcher_log);
    assert_non_null(strstr(launcher_log, "env rank 1:"));
    assert_non_null(strstr(launcher_log, "topology:"));
    free(launcher_log);
    assert_int_equal(leftover_segments("envtest"), 0);
    result_free(&r);
}

/* torchrun's rendezvous: every instance gets MASTER_ADDR=127.0.0.1 and one
 * MASTER_PORT that was free when the attempt began, whatever else holds
 * torchrun's default 29500 (held here, when it can be, so a fixed port
 * fails); a MASTER_PORT of the user's is kept. */
static int port_of(const char *text)
{
    const char *at = strstr(text, "MASTER_ADDR=127.0.0.1 MASTER_PORT=");
    return at ? atoi(at + strlen("MASTER_ADDR=127.0.0.1 MASTER_PORT=")) : -1;
}

static bool bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void test_master_port_is_free(void **state)
{
    (void)state;
    int held = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(29500), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const bool holding = held >= 0 && bind(held, (struct sockaddr *)&a, sizeof a) == 0 && listen(held, 1) == 0;
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--oversubscribe", "--job-id", "port", "--log-dir",
                                     "logs", "--", (char *)probe, NULL},
                          "port");
    assert_int_equal(exit_code(&r), 0);
    const int port = port_of(r.out);
    char *log1 = rank_log("port", 0, 1);
    assert_non_null(log1);
    if (port <= 0 || port_of(log1) != port)
        fail_msg("MASTER_PORT %d on rank 0, %d on rank 1", port, port_of(log1));
    if (holding)
        assert_int_not_equal(port, 29500);
    assert_true(bindable(port));  /* free: rank 0's store can listen there */
    free(log1);
    result_free(&r);
    if (held >= 0)
        close(held);
    setenv("MASTER_PORT", "31234", 1);
    r = run((char *[]){(char *)shmrun, "-n", "1", "--job-id", "port2", "--log-dir", "logs", "--", (char *)probe, NULL},
            "port2");
    unsetenv("MASTER_PORT");
    assert_int_equal(exit_code(&r), 0);
    assert_int_equal(port_of(r.out), 31234);
    result_free(&r);
}

static void test_user_settings_are_respected(void **state)
{
    (void)state;
    setenv("OMP_NUM_THREADS", "7", 1);
    struct result r = run((char *[]){(char *)shmrun, "-n", "1", "--job-id", "respect", "--log-dir", "logs",
                                     "--", (char *)probe, NULL},
                          "respect");
    unsetenv("OMP_NUM_THREADS");
    assert_int_equal(exit_code(&r), 0);
    assert_non_null(strstr(r.out, "OMP_NUM_THREADS=7"));
    assert_non_null(strstr(r.err, "keeping the user's OMP_NUM_THREADS=7"));
    result_free(&r);
}

static void test_tee_all_prefixes_ranks(void **state)
{
    (void)state;
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--tee-all", "--job-id", "tee", "--log-dir",
                                     "logs", "--", (char *)probe, NULL},
                          "tee");
    assert_int_equal(exit_code(&r), 0);
    assert_non_null(strstr(r.out, "[r1] rank=1 world=2"));
    assert_non_null(strstr(r.out, "[r0] rank=0 world=2"));
    result_free(&r);
}

static void test_ctrl_c_is_forwarded(void **state)
{
    (void)state;
    pid_t pid = spawn((char *[]){(char *)shmrun, "-n", "2", "--job-id", "ctrlc", "--log-dir", "logs", "--",
                                 (char *)probe, "--sleep", "60", NULL},
                      "ctrlc");
    assert_true(pid > 0);
    char path[512];
    snprintf(path, sizeof path, "%s/logs/ctrlc/shmrun.log", workdir);
    for (int i = 0; i < 200; i++) {  /* wait until both ranks run */
        char *log = slurp(path);
        bool started = log && strstr(log, "rank 1: pid");
        free(log);
        if (started)
            break;
        usleep(20 * 1000);
    }
    usleep(200 * 1000);
    double t0 = mono_now();
    kill(pid, SIGINT);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(mono_now() - t0 < 5);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 128 + SIGINT);
    char *err = slurp((snprintf(path, sizeof path, "%s/ctrlc.err", workdir), path));
    assert_non_null(strstr(err, "forwarding it to all instances"));
    assert_non_null(strstr(err, "signal 2 (INT)"));
    free(err);
}

/* ------------------------------------------------------ oversubscribe -- */

/* n ranks on cores 0-1: ranks share cores in pairs (or more), bound in
 * topology order, and still all-reduce correctly many times. */
static void check_oversubscribed(int n)
{
    char nbuf[8], job[32], want[128];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    snprintf(job, sizeof job, "over%d", n);
    struct result r = run((char *[]){(char *)shmrun, "-n", nbuf, "--oversubscribe", "--cores-list", "0-1",
                                     "--job-id", job, "--log-dir", "logs", "--", (char *)probe, "--join", "--loop",
                                     "20", NULL},
                          job);
    if (exit_code(&r) != 0)
        fail_msg("shmrun -n %d --oversubscribe failed: %s", n, r.err);
    snprintf(want, sizeof want, "SHARED x%d", n / 2);
    assert_non_null(strstr(r.err, want));
    assert_non_null(strstr(r.err, "WARNING: oversubscribed (--oversubscribe)"));
    for (int rank = 0; rank < n; rank++) {
        char *log = rank_log(job, 0, rank);
        assert_non_null(log);
        snprintf(want, sizeof want, "allreduce=ok x0=%d\n", n * (n - 1) / 2);
        assert_non_null(strstr(log, want));
        assert_non_null(strstr(log, "loop=ok iterations=20"));
        snprintf(want, sizeof want, "affinity=%d\n", rank * 2 / n);  /* ranks 0..n/2-1 on CPU 0 */
        if (!strstr(log, want))
            fail_msg("rank %d of %d: wanted %s in:\n%s", rank, n, want, log);
        snprintf(want, sizeof want, "OMP_NUM_THREADS=1 ");
        assert_non_null(strstr(log, want));
        free(log);
    }
    assert_int_equal(leftover_segments(job), 0);
    result_free(&r);
}

static void test_oversubscribe_4_and_8_ranks(void **state)
{
    (void)state;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        skip();
    check_oversubscribed(4);
    check_oversubscribed(8);
}

/* The rankfile command --print-mpirun prints pins mpirun's ranks to the
 * plan's PUs (Open MPI, this machine as the one host). */
static void test_print_mpirun_pins_like_the_plan(void **state)
{
    (void)state;
    const char *mpiexec = getenv("MPIEXEC");
    if (!mpiexec || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("skipped: no MPI, or fewer than 2 CPUs\n");
        skip();
    }
    char host[256] = "localhost";
    gethostname(host, sizeof host);
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--cores-list", "0-1", "--hosts", host,
                                     "--print-mpirun", "--", (char *)probe, NULL},
                          "printmpi");
    assert_int_equal(exit_code(&r), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/shmrun.rankfile", workdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    char *rf = strstr(r.out, "# shmrun.rankfile\n");
    assert_non_null(rf);
    fputs(rf + strlen("# shmrun.rankfile\n"), f);
    fclose(f);
    char *argv[] = {(char *)mpiexec, "--allow-run-as-root", "-np", "2", "--rankfile", path, "--mca",
                    "rmaps_rank_file_physical", "1", (char *)probe, NULL};
    struct result m = run(argv, "mpirun-rankfile");
    if (exit_code(&m) != 0 || !strstr(m.out, "affinity=0\n") || !strstr(m.out, "affinity=1\n"))
        fail_msg("mpirun with the printed rankfile: exit %d\n%s%s", exit_code(&m), m.out, m.err);
    result_free(&m);
    result_free(&r);
}

/* ----------------------------------------------------------- leftovers -- */

/* No rank holds a descriptor of the launcher's: its log, other ranks'
 * logs or heartbeats (the log was fd 3 in every rank). */
static void test_ranks_inherit_no_launcher_descriptors(void **state)
{
    (void)state;
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--job-id", "fds", "--log-dir", "logs", "--",
                                     (char *)probe, "--fds", NULL},
                          "fds");
    assert_int_equal(exit_code(&r), 0);
    for (int rank = 0; rank < 2; rank++) {
        char *log = rank_log("fds", 0, rank);
        assert_non_null(log);
        char *line = strstr(log, "fds=");
        assert_non_null(line);
        line[strcspn(line, "\n")] = '\0';
        if (strstr(line, "/logs/") || strstr(line, "shmrun.log") || strstr(line, "heartbeat"))
            fail_msg("rank %d inherited the launcher's files: %s", rank, line);
        free(log);
    }
    result_free(&r);
}

/* A file that something else left under a rank's segment name: the job
 * fails with that rank saying so, and the launcher removes the file. */
static void test_foreign_file_at_a_segment_name(void **state)
{
    (void)state;
    char name[160], path[200];
    assert_int_equal(st_segment_name(name, sizeof name, "foreign", 1), ST_OK);
    snprintf(path, sizeof path, "/dev/shm%s", name);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    close(fd);
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--job-id", "foreign", "--log-dir", "logs", "--",
                                     (char *)probe, "--join", NULL},
                          "foreign");
    assert_int_equal(exit_code(&r), 1);
    char *log1 = rank_log("foreign", 0, 1);
    assert_non_null(strstr(log1, "already exists"));
    assert_int_equal(leftover_segments("foreign"), 0);
    free(log1);
    result_free(&r);
}

/* ---------------------------------------------------------- bad flags -- */

/* A sweep passes the job's arguments on inside an argv of its own: a job
 * with more than fit is refused, never written past that argv's end. */
static void test_sweep_argument_limit(void **state)
{
    (void)state;
    enum { JOB_WORDS = 230 };
    char *argv[JOB_WORDS + 8] = {(char *)shmrun, "--sweep", "1x1", "--", "true"};
    for (int i = 5; i < JOB_WORDS + 4; i++)
        argv[i] = "x";
    struct result r = run(argv, "sweepargs");
    if (exit_code(&r) != 2 || !strstr(r.err, "arguments to pass on; at most 216"))
        fail_msg("exit %d, stderr: %s", exit_code(&r), r.err);
    result_free(&r);
}

static void test_bad_flags(void **state)
{
    (void)state;
    struct {
        char *args[8];
        const char *fragment;
    } cases[] = {
        {{"-n", "0", "--", "true"}, "--ninstances 0"},
        {{"-n", "two", "--", "true"}, "--ninstances 'two'"},
        {{"-n", "999", "--", "true"}, "--ninstances 999"},
        {{"-c", "1x", "--", "true"}, "--ncores-per-instance '1x'"},
        {{"--bind", "socket", "--", "true"}, "--bind 'socket'"},
        {{"--cores-list", "0-3000", "--", "true"}, "--cores-list '0-3000'"},
        {{"--nodes-list", "9", "--", "true"}, "--nodes-list '9'"},
        {{"--job-id", "a/b", "--", "true"}, "--job-id 'a/b'"},
        {{"--max-restarts", "-1", "--", "true"}, "--max-restarts -1"},
        {{"--grace", "soon", "--", "true"}, "--grace 'soon'"},
        {{"--frobnicate", "--", "true"}, "unknown option '--frobnicate'"},
        {{"-n", "1"}, "no program given"},
        {{"--synthetic", "pack:2 core:2", "--", "true"}, "add --dry-run"},
        {{"--synthetic", "pack:x", "--dry-run"}, "--synthetic 'pack:x'"},
        {{"--synthetic", "pack:1000000 core:1000000 pu:1000", "--dry-run"}, "more than 65536 PUs"},
        {{"--synthetic", "pack:4 numa:4 core:4096 pu:2", "--dry-run"}, "more than 65536 PUs"},
        {{"--stall-timeout", "soon", "--", "true"}, "--stall-timeout 'soon'"},
        {{"--print-mpirun", "-n", "1"}, "--print-mpirun needs --hosts"},
        {{"--hosts", "a,,b", "--print-mpirun"}, "--hosts 'a,,b': not a list of host names"},
        {{"--hosts", "a b", "--print-mpirun"}, "--hosts 'a b': not a list of host names"},
        {{"--hosts", "a", "--", "true"}, "--hosts goes with --print-mpirun"},
        {{"--stall-timeout", "-1", "--", "true"}, "--stall-timeout '-1'"},
        {{"-n", "3", "--cores-list", "0", "--", "true"}, "--oversubscribe lets instances share cores"},
        {{"--topology-xml", "/no/such.xml", "--dry-run"}, "--topology-xml /no/such.xml"},
        {{"--json", "--", "true"}, "--json goes with --dry-run"},
        {{"-n"}, "-n needs a value"},
        {{"--sweep", "3y2", "--", "true"}, "--sweep: '3y2' is neither"},
        {{"--sweep", "1x2,,", "--dry-run"}, "--sweep '1x2,,': an empty item"},
        {{"--sweep", "1x2", "-n", "2", "--", "true"}, "drop -n/-c"},
        {{"--sweep", "9x9", "--", "true"}, "--sweep setting '9x9'"},
        {{"--sweep", "1x1", "--", "true", "--resume"}, "--resume is not allowed in a sweep"},
        {{"--sweep", "1x1", "--", "true", "--metrics", "m"}, "--metrics is not allowed in a sweep"},
        {{"--sweep", "1x1", "--", "true", "--out", "o"}, "--out is not allowed in a sweep"},
        {{"--sweep", "1x1"}, "--sweep needs the job"},
        {{"--repeats", "2", "--", "true"}, "go with --sweep"},
        {{"--sweep", "1x1", "--repeats", "0", "--", "true"}, "--repeats 0"},
        {{"--sweep", "1x1", "--target-accuracy", "85", "--", "true"}, "--target-accuracy '85'"},
        {{"--sweep", "1x1", "--compare-torch", "--torch-mode", "fast", "--", "true"}, "--torch-mode 'fast'"},
        {{"--sweep", "1x1", "--torch-mode", "compile", "--", "true"}, "--torch-mode goes with --compare-torch"},
        {{"--sweep", "1x1", "--compare-torch", "--torch-mode", "channels_last", "--", "./shmtrain", "--text"},
         "--torch-mode channels_last: a language model"},
        /* a PyTorch script's sweep (any program but shmtrain) compares backends, not systems */
        {{"--compare-backends", "shm,gloo", "--", "true"}, "--compare-backends goes with --sweep"},
        {{"--sweep", "1x1", "--compare-backends", "shm,nccl", "--", "true"}, "--compare-backends 'shm,nccl'"},
        {{"--sweep", "1x1", "--compare-torch", "--", "python3", "train.py"}, "--compare-torch is shmtrain's"},
        {{"--sweep", "1x1", "--compare-backends", "shm,gloo", "--", "./shmtrain"}, "--compare-backends is for a "
                                                                                    "PyTorch script"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *argv[12] = {(char *)shmrun};
        int n = 1;
        for (int j = 0; j < 8 && cases[i].args[j]; j++)
            argv[n++] = cases[i].args[j];
        argv[n] = NULL;
        struct result r = run(argv, "badflag");
        if (exit_code(&r) != 2 || !strstr(r.err, cases[i].fragment) || strchr(r.err, '\n') != r.err + strlen(r.err) - 1)
            fail_msg("case %zu (%s): exit %d, stderr: %s", i, cases[i].fragment, exit_code(&r), r.err);
        assert_string_equal(r.out, "");
        result_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_plans),
        cmocka_unit_test(test_environment_and_binding),
        cmocka_unit_test(test_master_port_is_free),
        cmocka_unit_test(test_user_settings_are_respected),
        cmocka_unit_test(test_tee_all_prefixes_ranks),
        cmocka_unit_test(test_ctrl_c_is_forwarded),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_sweep_argument_limit),
        cmocka_unit_test(test_oversubscribe_4_and_8_ranks),
        cmocka_unit_test(test_ranks_inherit_no_launcher_descriptors),
        cmocka_unit_test(test_print_mpirun_pins_like_the_plan),
        cmocka_unit_test(test_foreign_file_at_a_segment_name),
    };
    return cmocka_run_group_tests(tests, shmrun_setup, shmrun_teardown);
}
