/* A training run that goes wrong, end to end: a NaN stops it and keeps the
 * last good checkpoint, Ctrl-C checkpoints and exits 130 (the signal taken
 * by one thread only), bad input names its file, a rank that fails is the
 * one blamed, and checkpoint temporaries left by a killed writer go. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainrun.h"
#include "shmtrain/ckpt.h"

static void test_nan_stops_and_keeps_the_checkpoint(void **state)
{
    (void)state;
    struct child_run good = train(1, "keep.ckpt", (char *[]){"--max-steps", "5", NULL}, 0);
    assert_int_equal(good.code, 0);
    char path[512];
    path_of(path, sizeof path, "keep.ckpt");
    char *before = slurp_or_empty(path);
    struct child_run boom = train(2, "keep.ckpt", (char *[]){"--lr", "100", "--momentum", "0.99", "--epochs", "1", NULL}, 0);
    assert_int_equal(boom.code, 1);
    assert_non_null(strstr(boom.err, "not finite"));
    assert_non_null(strstr(boom.err, "root cause"));
    assert_non_null(strstr(boom.err, "keep.ckpt, from before this run, is untouched"));  /* not "this run's" */
    char *after = slurp_or_empty(path);
    assert_string_equal(before, after);
    free(before), free(after);
    /* With nothing on disk, the message says so (it said "the last good checkpoint is kept"). */
    struct child_run none = train(1, "never.ckpt", (char *[]){"--lr", "100", "--momentum", "0.99", "--epochs", "1", NULL}, 0);
    assert_int_equal(none.code, 1);
    assert_non_null(strstr(none.err, "no checkpoint was written (none was due yet)"));
    /* After this run's own periodic checkpoint, that one is named. */
    struct child_run late = train(1, "late.ckpt", (char *[]){"--lr", "2", "--momentum", "0.99", "--epochs", "1",
                                                              "--checkpoint-every", "1", NULL}, 0);
    if (late.code == 1)  /* diverged after a step or more: the last good one is this run's */
        assert_non_null(strstr(late.err, "the last good checkpoint ("));
    child_run_free(&good), child_run_free(&boom), child_run_free(&none), child_run_free(&late);
}

/* A --checkpoint-every save that fails (here a file-size limit below the
 * checkpoint's size, as a full disk would) is a warning and training goes
 * on; the end's save failing fails the run, and says no earlier file exists. */
static void test_failed_periodic_checkpoint_goes_on(void **state)
{
    (void)state;
    struct data_files d = synthetic_files();
    char ckpt[512], metrics[512];
    path_of(ckpt, sizeof ckpt, "full.ckpt");
    path_of(metrics, sizeof metrics, "full.jsonl");
    unlink(ckpt);
    /* A wide perceptron under AdamW: 1.63 M parameters make a 6.5 MB
     * gradient (the group's segment, 13 MB with its staging) and a 19.5 MB
     * checkpoint (weights and two moments); a 16 MiB limit (32768 of POSIX
     * sh's 512-byte blocks) lets the first be
     * and not the second. */
    const char wide[] = "input 1 28 28\nlinear 2048\nrelu\nlinear 10\n";
    char model[512];
    write_bytes("wide.model", wide, sizeof wide - 1);
    path_of(model, sizeof model, "wide.model");
    struct child_run r = run_argv(
        (char *const[]){"/bin/sh", "-c", "ulimit -f 32768; exec \"$@\"", "sh", (char *)tr_shmtrain, "--model", model,
                        "--optimizer", "adamw", "--lr", "1e-3",
                        "--train-images", d.tri, "--train-labels", d.trl, "--test-images", d.tei, "--test-labels",
                        d.tel, "--checkpoint", ckpt, "--metrics", metrics, "--max-steps", "6",
                        "--checkpoint-every", "2", "--log-every", "2", "--quiet", NULL},
        0);
    if (r.code != 1)
        fail_msg("exit %d (want 1, the final save failing): %s", r.code, r.err);
    const char *warn = strstr(r.err, "warning: step 2: checkpoint");
    if (!warn || !strstr(warn, "training goes on (the next checkpoint at step 4)") ||
        !strstr(r.err, "warning: step 4: checkpoint"))
        fail_msg("no warning for the failed periodic saves: %s", r.err);
    assert_non_null(strstr(r.err, "there is none before it"));
    char *m = slurp_or_empty(metrics);
    assert_non_null(strstr(m, "\"step\":6,"));  /* it trained to the end */
    free(m);
    assert_int_equal(access(ckpt, F_OK), -1);
    child_run_free(&r);
}

static void test_ctrl_c_checkpoints_and_exits(void **state)
{
    (void)state;
    struct child_run r = train(2, "int.ckpt", (char *[]){"--epochs", "50", "--batch-size", "16", NULL}, 0.5);
    if (r.code != 130)
        fail_msg("exit %d: %s", r.code, r.err);
    char path[512];
    path_of(path, sizeof path, "int.ckpt");
    if (access(path, F_OK) != 0)
        fail_msg("no checkpoint after Ctrl-C: %s", r.err);
    st_ckpt c = read_ckpt("int.ckpt");
    assert_true(c.step > 0);
    st_ckpt_free(&c);
    child_run_free(&r);
}

/* The mask line `key` ("SigBlk:", "SigCgt:") of a /proc status file. */
static unsigned long long proc_mask(const char *status_path, const char *key)
{
    FILE *f = fopen(status_path, "r");  /* /proc files have no size: read lines */
    if (!f)
        fail_msg("cannot read %s", status_path);
    char line[256];
    bool found = false;
    unsigned long long mask = 0;
    while (!found && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) {
            mask = strtoull(line + strlen(key), NULL, 16);
            found = true;
        }
    fclose(f);
    if (!found)
        fail_msg("%s has no %s", status_path, key);
    return mask;
}

/* No thread of a training instance may run a signal handler: oneDNN's
 * gemm:jit kernels point rsp into the heap (oneDNN issue #4845), so a
 * handler frame on a compute thread corrupts it.  Every thread, OpenMP
 * workers included, blocks SIGINT and SIGTERM, no handler is installed,
 * and the signal thread still turns Ctrl-C into a clean stop. */
static void test_no_thread_runs_a_signal_handler(void **state)
{
    (void)state;
    struct data_files d = synthetic_files();
    char out[512], err[512];
    path_of(out, sizeof out, "sig.out");
    path_of(err, sizeof err, "sig.err");
    char *argv[] = {(char *)tr_shmtrain, "--model", "mlp", "--train-images", d.tri, "--train-labels", d.trl,
                    "--test-images", d.tei, "--test-labels", d.tel, "--epochs", "50", "--batch-size", "16",
                    "--checkpoint", "sig.ckpt", "--metrics", "sig.jsonl", "--quiet", NULL};
    char path[512];
    path_of(path, sizeof path, "sig.jsonl");
    unlink(path);
    setenv("OMP_NUM_THREADS", "2", 1);  /* at least one OpenMP worker to check */
    pid_t pid = spawn_redirected(argv, tr_dir, out, err);
    unsetenv("OMP_NUM_THREADS");
    wait_for_text("sig.jsonl", "\"type\":\"train\"");  /* the workers exist once steps ran */
    const unsigned long long both = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
    char status[512];
    snprintf(status, sizeof status, "/proc/%d/status", (int)pid);
    assert_int_equal(proc_mask(status, "SigCgt:") & both, 0);
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *tasks = opendir(path);
    assert_non_null(tasks);
    int threads = 0, waiting = 0;
    for (struct dirent *e; (e = readdir(tasks)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        threads++;
        snprintf(status, sizeof status, "/proc/%d/task/%s/status", (int)pid, e->d_name);
        if ((proc_mask(status, "SigBlk:") & both) == both)
            continue;
        /* sigwait unblocks what it waits for while it waits: allowed for
         * the signal thread alone. */
        snprintf(status, sizeof status, "/proc/%d/task/%s/wchan", (int)pid, e->d_name);
        char wchan[128] = "";
        FILE *f = fopen(status, "r");  /* "0" or absent where the kernel hides it */
        if (f && !fgets(wchan, sizeof wchan, f))
            wchan[0] = 0;
        if (f)
            fclose(f);
        if (strcmp(wchan, "0") && *wchan && !strstr(wchan, "sigtimedwait"))
            fail_msg("thread %s of shmtrain takes SIGINT/SIGTERM outside sigwait (%s)", e->d_name, wchan);
        waiting++;
    }
    closedir(tasks);
    assert_true(threads >= 3);  /* main, the signal thread, an OpenMP worker */
    assert_int_equal(waiting, 1);
    kill(pid, SIGINT);
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 130);
    st_ckpt c = read_ckpt("sig.ckpt");
    assert_true(c.step > 0);
    st_ckpt_free(&c);
}

static void test_bad_inputs_name_their_file(void **state)
{
    (void)state;
    struct child_run r = train(1, "x.ckpt", (char *[]){"--model", "cnn", "--train-labels", "/no/labels", NULL}, 0);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "/no/labels: cannot open"));
    child_run_free(&r);
    /* Labels beyond the model's classes. */
    r = train(1, "x.ckpt", (char *[]){"--model", "/dev/null", NULL}, 0);
    assert_int_equal(r.code, 2);  /* a bad --model is a bad flag, and shmrun passes its status on */
    assert_non_null(strstr(r.err, "/dev/null: empty model"));
    child_run_free(&r);
    char model[512];
    path_of(model, sizeof model, "five.model");
    FILE *f = fopen(model, "w");
    fputs("input 1 28 28\nlinear 5\n", f);
    fclose(f);
    r = train(1, "x.ckpt", (char *[]){"--model", model, NULL}, 0);
    assert_int_equal(r.code, 1);
    char labels[512];
    path_of(labels, sizeof labels, "train-labels: has label 9 but model");
    if (!strstr(r.err, labels))  /* the labels file, not the images */
        fail_msg("wanted '%s' in: %s", labels, r.err);
    child_run_free(&r);
    /* Binary content in a model file, before its layers or among them. */
#define TEXT(literal) literal, sizeof(literal) - 1
    static const struct {
        const char *text;
        size_t len;
        const char *want;
    } binary[] = {{TEXT("input 1 28 28\n\0linear 10\n"), "line 2, column 1: binary content (byte 0x00)"},
                  {TEXT("input 1 28 28\nlinear 10\0\n"), "line 2, column 10: binary content"},
                  {TEXT("input 1 28 28\nrelu\nlin\x01" "ear 10\n"), "line 3, column 4: binary content (byte 0x01)"}};
#undef TEXT
    for (size_t i = 0; i < sizeof binary / sizeof *binary; i++) {
        path_of(model, sizeof model, "binary.model");
        f = fopen(model, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(binary[i].text, 1, binary[i].len, f), binary[i].len);
        fclose(f);
        r = train(1, "x.ckpt", (char *[]){"--model", model, NULL}, 0);
        if (r.code != 2 || !strstr(r.err, binary[i].want) || !strstr(r.err, "binary.model"))  /* a bad --model */
            fail_msg("model %zu: exit %d, '%s', wanted '%s'", i, r.code, r.err, binary[i].want);
        child_run_free(&r);
    }
    const struct {
        char *arg[3];
        const char *fragment;
    } flags[] = {{{"--epochs", "0"}, "--epochs 0"},       {{"--lr", "fast"}, "--lr 'fast'"},
                 {{"--optimizer", "lbfgs"}, "--optimizer 'lbfgs'"}, {{"--schedule", "linear"}, "--schedule 'linear'"},
                 {{"--batch-size", "-3"}, "--batch-size -3"}, {{"--bogus"}, "unknown option '--bogus'"},
                 /* values that wrapped modulo 2^32 into a batch of 16 or one epoch */
                 {{"--batch-size", "4294967312"}, "--batch-size 4294967312: out of range"},
                 {{"--epochs", "4294967297"}, "--epochs 4294967297: out of range"},
                 {{"--train-subset", "99999999999999999999"}, "--train-subset 99999999999999999999: out of range"},
                 {{"--seed", "18446744073709551617"}, "--seed 18446744073709551617: out of range"},
                 {{"--resume", "a.ckpt", "b.ckpt"}, "unexpected argument 'b.ckpt'"}};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        char *argv[6] = {(char *)tr_shmtrain, flags[i].arg[0], flags[i].arg[1], flags[i].arg[2], NULL};
        struct child_run b = run_argv(argv, 0);
        if (b.code != 2 || !strstr(b.err, flags[i].fragment))
            fail_msg("%s: exit %d, '%s'", flags[i].fragment, b.code, b.err);
        child_run_free(&b);
    }
}

/* Bad data under two instances: rank 1 stops because rank 0 failed, and
 * says so by its exit status; the launcher names rank 0 and its message. */
static void test_bad_data_blames_the_rank_that_failed(void **state)
{
    (void)state;
    struct data_files d = synthetic_files();
    for (int attempt = 0; attempt < 3; attempt++) {
        char *argv[] = {(char *)tr_shmrun, "-n", "2", "--log-dir", "logs", "--", (char *)tr_shmtrain, "--model", "mlp",
                        "--train-images", d.tri, "--train-labels", "/no/such/labels", "--test-images", d.tei,
                        "--test-labels", d.tel, "--quiet", NULL};
        struct child_run r = run_argv(argv, 0);
        assert_int_equal(r.code, 1);
        if (!strstr(r.err, "root cause: rank 0") || !strstr(r.err, "/no/such/labels: cannot open") ||
            !strstr(r.err, "exit 75 (a peer failed)"))
            fail_msg("attempt %d: %s", attempt, r.err);
        child_run_free(&r);
    }
}

/* A writer killed mid-checkpoint leaves NAME.tmp.PID: the next run that
 * writes NAME removes it when PID is dead, and leaves a live writer's. */
static void test_stale_checkpoint_temporaries_are_removed(void **state)
{
    (void)state;
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    char stale[512], live[512], other[512], name[64];
    snprintf(name, sizeof name, "tmpc.ckpt.tmp.%d", (int)dead);
    path_of(stale, sizeof stale, name);
    snprintf(name, sizeof name, "tmpc.ckpt.tmp.%d", (int)getpid());
    path_of(live, sizeof live, name);
    snprintf(name, sizeof name, "othr.ckpt.tmp.%d", (int)dead);
    path_of(other, sizeof other, name);
    const char *files[] = {stale, live, other};
    for (int i = 0; i < 3; i++)
        write_bytes(strrchr(files[i], '/') + 1, "partial", 7);
    struct child_run r = train(1, "tmpc.ckpt", (char *[]){"--max-steps", "3", NULL}, 0);
    if (r.code != 0)
        fail_msg("%s", r.err);
    assert_int_equal(access(stale, F_OK), -1);   /* its writer is dead */
    assert_int_equal(access(live, F_OK), 0);     /* its writer (this test) lives */
    assert_int_equal(access(other, F_OK), 0);    /* another checkpoint's */
    unlink(live);
    unlink(other);
    child_run_free(&r);
}


int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_stops_and_keeps_the_checkpoint),
        cmocka_unit_test(test_failed_periodic_checkpoint_goes_on),
        cmocka_unit_test(test_ctrl_c_checkpoints_and_exits),
        cmocka_unit_test(test_no_thread_runs_a_signal_handler),
        cmocka_unit_test(test_bad_inputs_name_their_file),
        cmocka_unit_test(test_bad_data_blames_the_rank_that_failed),
        cmocka_unit_test(test_stale_checkpoint_temporaries_are_removed),
    };
    return TRAINRUN_GROUP("test_train_faults", tests, argc, argv);
}
