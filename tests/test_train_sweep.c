/* shmrun --sweep over real shmtrain runs, end to end: the report files and
 * their numbers, PyTorch DDP beside it when installed, sweeps at one global
 * batch, an interrupted sweep, and runs that fail.  (The sweep's arithmetic
 * and report readers without training: test_sweep.c.) */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainrun.h"

/* The peer's Python as the sweep picks it: SHMTRAIN_PYTHON (ctest sets the
 * bench venv's where it has PyTorch), else the system's. */
static const char *peer_python(void)
{
    const char *py = getenv("SHMTRAIN_PYTHON");
    return py && *py ? py : "/usr/bin/python3";
}

static bool peer_imports(const char *module, const char *pythonpath)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' -c 'import %s' >/dev/null 2>&1", pythonpath, peer_python(),
             module);
    return access(peer_python(), X_OK) == 0 && system(cmd) == 0;
}

static bool torch_importable(void) { return peer_imports("torch", ""); }

/* The shm backend as the sweep finds it: installed, or built beside shmrun. */
static bool shm_backend_importable(void)
{
    char built[600];
    const char *slash = strrchr(tr_shmrun, '/');
    snprintf(built, sizeof built, "%.*s/python", slash ? (int)(slash - tr_shmrun) : 1, slash ? tr_shmrun : ".");
    return peer_imports("shmtrain_torch", built);
}

/* shmrun --sweep end to end: two settings plus the 1 x all-cores baseline
 * it adds, a few steps, one repeat; every output file, numbers in them, and
 * PyTorch DDP beside it when python3-torch is installed. */
static void test_sweep_end_to_end(void **state)
{
    (void)state;
    char out[300];
    struct data_files d = synthetic_files();
    path_of(out, sizeof out, "sweep");
    bool torch = torch_importable();
    if (!torch)
        printf("%s has no PyTorch: the sweep runs shmtrain only\n", peer_python());
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char *argv[64];
    int k = 0;
    const char *head[] = {tr_shmrun, "--sweep", cores >= 2 ? "1x1,2x1" : "1x1", "--repeats", "1", "--sweep-out", out,
                          "--target-accuracy", "0.3"};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++)
        argv[k++] = (char *)head[i];
    if (torch) {  /* the peer in a mode of its own: the report says the mode its run record gives */
        argv[k++] = "--compare-torch";
        argv[k++] = "--torch-mode";
        argv[k++] = "channels_last";
    }
    const char *job[] = {"--", tr_shmtrain, "--model", "mlp", "--train-images", d.tri, "--train-labels", d.trl,
                         "--test-images", d.tei, "--test-labels", d.tel, "--epochs", "5", "--max-steps", "40",
                         "--log-every", "10", "--eval-every", "20", "--quiet"};
    for (size_t i = 0; i < sizeof job / sizeof *job; i++)
        argv[k++] = (char *)job[i];
    argv[k] = NULL;
    struct child_run r = run_argv(argv, 0);
    if (r.code != 0)
        fail_msg("sweep failed (%d): %s", r.code, r.err);
    const bool shm = torch && shm_backend_importable();
    printf("systems: shmtrain%s%s\n", torch ? ", PyTorch DDP over gloo" : "", shm ? ", PyTorch DDP over shm" : "");
    /* 2x1 runs once more, its instances alone (the ceiling); 1-instance settings need not */
    const int settings = cores >= 2 ? 3 : 1, systems = 1 + torch + shm, independent = cores >= 2;

    char path[400];
    snprintf(path, sizeof path, "%s/runs.csv", out);
    char *csv = slurp_or_empty(path);
    int ok_rows = 0;
    assert_int_equal(count_lines(csv), 1 + settings * systems + independent);
    for (const char *p = csv; (p = strstr(p, ",shmtrain,1,")) != NULL; p++) {
        const char *order = p + strlen(",shmtrain,1,"), *ok = strchr(order, ',') + 1;
        ok_rows += strncmp(ok, "1,", 2) == 0;  /* ...,system,repeat,order,ok,... */
    }
    assert_int_equal(ok_rows, settings);
    if (cores >= 2) {
        assert_non_null(strstr(csv, "\n1x2,1,2,shmtrain,1,"));
        assert_non_null(strstr(csv, "\n2x1,2,1,shmtrain,1,"));
        const char *alone = strstr(csv, "\n2x1,2,1,shmtrain-independent,1,");
        if (!alone || strncmp(strchr(alone + strlen("\n2x1,2,1,shmtrain-independent,1,"), ','), ",1,", 3) != 0)
            fail_msg("no successful independent 2x1 run in runs.csv:\n%s", csv);
        int alone_runs = 0;  /* and no 1-instance setting's */
        for (const char *p = csv; (p = strstr(p, ",shmtrain-independent,")) != NULL; p++)
            alone_runs++;
        assert_int_equal(alone_runs, 1);
    }
    for (int sys = 1; sys < systems; sys++) {  /* each peer's run of the baseline: ...,system,1,order,ok,... */
        const char *key = sys == 1 ? ",pytorch-ddp,1," : ",pytorch-ddp-shm,1,", *at = strstr(csv, key);
        if (!at)
            fail_msg("no %s run in runs.csv:\n%s", key, csv);
        if (strncmp(strchr(at + strlen(key), ','), ",1,", 3) != 0)
            fail_msg("that run failed: %.200s", at);
    }

    snprintf(path, sizeof path, "%s/report.md", out);
    char *md = slurp_or_empty(path);
    assert_non_null(strstr(md, "| **"));
    assert_non_null(strstr(md, "**Best: "));
    assert_non_null(strstr(md, "time to 30% (s)"));
    if (independent) {  /* the 2x1 row's ratio to its ceiling, a number */
        const char *row = strstr(md, "| 2x1");
        row = row ? row : strstr(md, "| **2x1");
        assert_non_null(strstr(md, "| shmtrain / independent (no exchange) |"));
        const char *end = row ? strchr(row, '\n') : NULL;
        assert_non_null(end);
        const char *x = end - 1;
        while (x > row && *x != 'x')  /* the last column: "0.83x |" */
            x--;
        if (!(x > row && x[-1] >= '0' && x[-1] <= '9'))
            fail_msg("the 2x1 row has no ratio to its independent run: %.*s", (int)(end - row), row);
        const char *slow = strstr(row, "| rank ");  /* its slowest instance, named */
        if (!slow || slow > end || !strstr(slow, "x, p90 "))
            fail_msg("the 2x1 row names no slowest instance: %.*s", (int)(end - row), row);
    }
    /* the oneDNN the instances ran on, as shmtrain --version names it */
    struct child_run v = run_argv((char *const[]){(char *)tr_shmtrain, "--version", NULL}, 0);
    const char *at = strstr(v.out, "oneDNN ");
    char want[64];
    assert_int_equal(v.code, 0);
    assert_non_null(at);
    snprintf(want, sizeof want, "| oneDNN | %.*s", (int)strcspn(at + 7, " "), at + 7);
    assert_int_equal(want[sizeof "| oneDNN | " - 1], '3');  /* the engine is written for 3.x */
    assert_non_null(strstr(md, want));
    child_run_free(&v);
    assert_true((strstr(md, "PyTorch DDP (gloo) samples/s") != NULL) == torch);
    assert_true((strstr(md, ", mode channels_last |") != NULL) == torch);
    assert_true((strstr(md, "PyTorch DDP (shm) samples/s") != NULL) == shm);
    assert_non_null(strstr(r.out, "# Partitioning sweep"));  /* the report is shown too */

    snprintf(path, sizeof path, "%s/sweep.json", out);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                              "assert len(d[\"runs\"]) == %d and d[\"best\"]' %s", settings * systems + independent, path);
    if (access("/usr/bin/python3", X_OK) == 0)
        assert_int_equal(system(cmd), 0);

    const char *plots[] = {"throughput.svg", "timesplit.svg", "accuracy.svg", "instances.svg"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", out, plots[i]);
        if (access("/usr/bin/gnuplot", X_OK) == 0) {
            char *svg = slurp_or_empty(path);
            if (!strstr(svg, "<svg"))
                fail_msg("%s is not an SVG", path);
            free(svg);
        } else {
            assert_non_null(strstr(md, "gnuplot is not installed"));
        }
    }
    /* Nothing lands in the caller's directory (gnuplot's log goes into the sweep's; each run's
     * folder too, not in runs/, where runs/latest would point at a sweep's run). */
    path_of(path, sizeof path, "plot.log");
    assert_int_not_equal(access(path, F_OK), 0);
    path_of(path, sizeof path, "runs");
    assert_int_not_equal(access(path, F_OK), 0);
    char where[700];
    snprintf(where, sizeof where, "test -n \"$(find %s/runs -path '*-1x1-shmtrain-r1/run/metrics.jsonl')\"", out);
    assert_int_equal(system(where), 0);
    /* Checkpoints are not kept and no segment is left behind. */
    snprintf(cmd, sizeof cmd, "test -z \"$(find %s -name '*.ckpt')\"", out);
    assert_int_equal(system(cmd), 0);
    assert_no_sweep_segments();
    free(csv);
    free(md);
    child_run_free(&r);
}

/* Ctrl-C in a sweep: the running gang stops, the runs so far are reported,
 * exit 130, nothing left in /dev/shm. */
/* --sweep-global-batch: 1x1 and 1x2 accumulate two micro-batches of 16,
 * 2x1 runs one on each instance: the same 32 images a step everywhere, so
 * every setting ends with the same model: its test loss the same up to
 * round-off (~1e-6; sweep.json shows 4 decimals, so 3e-4 allows the last
 * digit), where a 1x1 run of batch 16 alone ended 0.0012 away. */
static void test_sweep_global_batch(void **state)
{
    (void)state;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("one CPU: no 2x1 setting to compare\n");
        return;
    }
    char out[300];
    struct data_files d = synthetic_files();
    path_of(out, sizeof out, "sweep-global");
    char *argv[] = {(char *)tr_shmrun, "--sweep", "1x1,2x1", "--repeats", "1", "--sweep-out", out,
                    "--sweep-global-batch", "32", "--", (char *)tr_shmtrain, "--model", "mlp", "--train-images",
                    d.tri, "--train-labels", d.trl, "--test-images", d.tei, "--test-labels", d.tel, "--batch-size",
                    "16", "--max-steps", "30", "--momentum", "0", "--lr", "0.02", "--log-every", "10", "--quiet",
                    NULL};
    struct child_run r = run_argv(argv, 0);
    if (r.code != 0)
        fail_msg("sweep failed (%d): %s", r.code, r.err);
    char path[400];
    path_of(path, sizeof path, "runs");  /* each run's folder in the sweep's, not the caller's runs/ */
    assert_int_not_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/sweep.json", out);
    char *json = slurp_or_empty(path);
    const char *settings[] = {"\"setting\":\"1x1 acc 2\",\"system\":\"shmtrain\"",
                              "\"setting\":\"1x2 acc 2\",\"system\":\"shmtrain\"",
                              "\"setting\":\"2x1\",\"system\":\"shmtrain\""};
    double loss[3];
    for (int i = 0; i < 3; i++) {
        const char *run = strstr(json, "\"runs\"");
        run = run ? strstr(run, settings[i]) : NULL;
        const char *at = run ? strstr(run, "\"final_loss\":") : NULL;
        if (!at)
            fail_msg("no run %s with a final loss in:\n%s", settings[i], json);
        loss[i] = atof(at + strlen("\"final_loss\":"));
        assert_true(loss[i] > 0);
    }
    printf("final test losses: 1x1 acc 2 %.4f, 1x2 acc 2 %.4f, 2x1 %.4f\n", loss[0], loss[1], loss[2]);
    for (int i = 1; i < 3; i++)
        if (fabs(loss[i] - loss[0]) > 3e-4)
            fail_msg("final test losses %.4f %.4f %.4f: not the same training", loss[0], loss[1], loss[2]);
    free(json);
    child_run_free(&r);
}

static void test_sweep_interrupted(void **state)
{
    (void)state;
    char out[300];
    struct data_files d = synthetic_files();
    path_of(out, sizeof out, "sweep-int");
    char *argv[] = {(char *)tr_shmrun, "--sweep", "1x1", "--repeats", "3", "--sweep-out", out, "--",
                    (char *)tr_shmtrain, "--model", "cnn", "--train-images", d.tri, "--train-labels", d.trl,
                    "--test-images", d.tei, "--test-labels", d.tel, "--epochs", "200", "--quiet", NULL};
    struct child_run r = run_argv(argv, 3.0);
    if (r.code != 130)
        fail_msg("exit %d, expected 130: %s", r.code, r.err);
    assert_non_null(strstr(r.err, "sweep interrupted after 1 of "));
    char path[400];
    snprintf(path, sizeof path, "%s/report.md", out);
    char *md = slurp_or_empty(path);
    assert_non_null(strstr(md, "1 of 1 runs FAILED"));
    snprintf(path, sizeof path, "%s/runs.csv", out);
    char *csv = slurp_or_empty(path);
    assert_int_equal(count_lines(csv), 2);  /* the header and the interrupted run */
    assert_no_sweep_segments();
    free(md);
    free(csv);
    child_run_free(&r);
}

/* A run that fails is reported and the sweep goes on: exit 1, every run in
 * the CSV with its error. */
static void test_sweep_reports_failed_runs(void **state)
{
    (void)state;
    char out[300];
    path_of(out, sizeof out, "sweep-fail");
    char *argv[] = {(char *)tr_shmrun, "--sweep", "1x1", "--repeats", "2", "--sweep-out", out, "--", (char *)tr_shmtrain,
                    "--model", "no-such-model", "--quiet", NULL};
    struct child_run r = run_argv(argv, 0);
    assert_int_equal(r.code, 1);
    char path[400];
    snprintf(path, sizeof path, "%s/runs.csv", out);
    char *csv = slurp_or_empty(path);
    int failed = 0;
    for (const char *p = csv; (p = strstr(p, ",0,,,")) != NULL; p++)
        failed++;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(failed, cores >= 2 ? 4 : 2);  /* 1x1 and the added 1x2, twice each */
    assert_non_null(strstr(csv, "an instance failed"));
    snprintf(path, sizeof path, "%s/report.md", out);
    char *md = slurp_or_empty(path);
    assert_non_null(strstr(md, "**No setting completed a run.**"));
    free(csv);
    free(md);
    child_run_free(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_end_to_end),
        cmocka_unit_test(test_sweep_global_batch),
        cmocka_unit_test(test_sweep_interrupted),
        cmocka_unit_test(test_sweep_reports_failed_runs),
    };
    return TRAINRUN_GROUP("test_train_sweep", tests, argc, argv);
}
