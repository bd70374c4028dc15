/* The trainer end to end: data readers on malformed files, checkpoints
 * (format, corruption, atomicity), equivalence of N x b with 1 x Nb,
 * determinism, resume, NaN stop, Ctrl-C, convergence on Fashion-MNIST.
 * shmrun --sweep over real training runs: test_train_sweep.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "forkranks.h"
#include "trainrun.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/data.h"

/* ------------------------------------------------------- data readers -- */

static void expect_idx_error(const char *img, const char *lab, const char *fragment)
{
    char ip[512], lp[512];
    path_of(ip, sizeof ip, img);
    path_of(lp, sizeof lp, lab);
    st_dataset *d = (st_dataset *)0x1;
    st_status st = st_dataset_load_idx(&d, ip, lp);
    size_t flen = strlen(fragment);
    bool anchored = flen && fragment[flen - 1] == '$';
    char want[256];
    snprintf(want, sizeof want, "%.*s", (int)(anchored ? flen - 1 : flen), fragment);
    const char *at = strstr(st_last_error(), want);
    if (st == ST_OK || d != NULL || !at || (anchored && at[strlen(want)] != '\0'))
        fail_msg("%s/%s: status %d, message '%s', wanted '%s'", img, lab, (int)st, st_last_error(), fragment);
}

static void test_data_readers_refuse_bad_files(void **state)
{
    (void)state;
    uint8_t pix[4 * 9] = {0}, lab[4] = {1, 2, 3, 4}, buf[256];
    uint32_t d3[3] = {4, 3, 3}, d1[1] = {4}, d1b[1] = {3}, d2[2] = {4, 9};
    write_bytes("good-images", buf, idx(buf, 0x08, 3, d3, pix, sizeof pix));
    write_bytes("good-labels", buf, idx(buf, 0x08, 1, d1, lab, sizeof lab));
    st_dataset *d = NULL;
    char ip[512], lp[512];
    path_of(ip, sizeof ip, "good-images");
    path_of(lp, sizeof lp, "good-labels");
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);
    assert_int_equal(st_dataset_size(d), 4);
    assert_int_equal(st_dataset_max_label(d), 4);
    st_dataset_destroy(d);

    size_t n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    buf[1] = 7;
    write_bytes("bad-magic", buf, n);
    write_bytes("float-type", buf, idx(buf, 0x0D, 3, d3, pix, sizeof pix));
    write_bytes("two-dims", buf, idx(buf, 0x08, 2, d2, pix, sizeof pix));
    write_bytes("short-images", buf, idx(buf, 0x08, 3, d3, pix, sizeof pix) - 5);
    write_bytes("three-labels", buf, idx(buf, 0x08, 1, d1b, lab, 3));
    write_bytes("empty", buf, 0);
    uint32_t d3l[3] = {4, 1, 1};
    write_bytes("3d-labels", buf, idx(buf, 0x08, 3, d3l, lab, sizeof lab));
    n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    buf[n] = 0x42;  /* one byte after the last image */
    write_bytes("trailing-images", buf, n + 1);
    n = idx(buf, 0x08, 1, d1, lab, sizeof lab);
    memset(buf + n, 1, 3);
    write_bytes("trailing-labels", buf, n + 3);
    n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    buf[n] = 0x42;
    write_gz("trailing-images.gz", buf, n + 1);
    n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    write_gz("good-images.gz", buf, n);
    /* A gzip stream cut short, and one with bytes flipped in the middle. */
    char gzpath[512];
    path_of(gzpath, sizeof gzpath, "good-images.gz");
    struct stat sb;
    assert_int_equal(stat(gzpath, &sb), 0);
    uint8_t *gz = malloc((size_t)sb.st_size);
    FILE *f = fopen(gzpath, "rb");
    assert_int_equal(fread(gz, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    write_bytes("cut.gz", gz, (size_t)sb.st_size - 12);
    for (int i = 12; i < 18; i++)
        gz[i] ^= 0xA5;
    write_bytes("flipped.gz", gz, (size_t)sb.st_size);
    free(gz);

    expect_idx_error("bad-magic", "good-labels", "bad-magic: not an IDX file");
    expect_idx_error("float-type", "good-labels", "element type 0x0d is not supported");
    expect_idx_error("two-dims", "good-labels", "has 2 dimensions, expected 3 to 4$");
    expect_idx_error("short-images", "good-labels", "short-images: truncated: expected 36 bytes of images");
    expect_idx_error("good-images", "three-labels", "has 4 images but");
    expect_idx_error("empty", "good-labels", "empty: truncated");
    expect_idx_error("missing", "good-labels", "missing: cannot open");
    expect_idx_error("cut.gz", "good-labels", "cut.gz:");
    expect_idx_error("flipped.gz", "good-labels", "flipped.gz:");
    expect_idx_error("good-images", "3d-labels", "3d-labels: IDX file has 3 dimensions, expected 1$");
    expect_idx_error("trailing-images", "good-labels", "trailing-images: 1 bytes after the last of its 4 items");
    expect_idx_error("trailing-images.gz", "good-labels", "trailing-images.gz: 1 bytes after the last of its 4");
    expect_idx_error("good-images", "trailing-labels", "trailing-labels: 3 bytes after the last of its 4 items");
    /* A label beyond the model's classes is the labels file's fault. */
    d = NULL;
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);
    assert_string_equal(st_dataset_label_source(d), lp);
    assert_string_equal(st_dataset_source(d), ip);
    st_dataset_destroy(d);
    path_of(ip, sizeof ip, "good-images.gz");
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);  /* gzip itself is fine */
    st_dataset_destroy(d);
}

static void test_cifar_reader(void **state)
{
    (void)state;
    uint8_t rec[2 * 3073];
    memset(rec, 7, sizeof rec);
    rec[0] = 3;
    rec[3073] = 9;
    write_bytes("cifar.bin", rec, sizeof rec);
    char p[512];
    path_of(p, sizeof p, "cifar.bin");
    const char *paths[] = {p};
    st_dataset *d = NULL;
    assert_int_equal(st_dataset_load_cifar(&d, paths, 1, false), ST_OK);
    assert_int_equal(st_dataset_size(d), 2);
    assert_int_equal(st_dataset_label(d, 1), 9);
    int c, h, w;
    st_dataset_shape(d, &c, &h, &w);
    assert_true(c == 3 && h == 32 && w == 32);
    st_dataset_destroy(d);
    write_bytes("cifar-short.bin", rec, 3073 + 100);
    path_of(p, sizeof p, "cifar-short.bin");
    assert_int_equal(st_dataset_load_cifar(&d, paths, 1, false), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "not a whole number of 3073-byte CIFAR-10 records"));
    rec[0] = 12;
    write_bytes("cifar-label.bin", rec, 3073);
    path_of(p, sizeof p, "cifar-label.bin");
    assert_int_equal(st_dataset_load_cifar(&d, paths, 1, false), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "label 12"));
}

static void test_sampler_shards_like_distributed_sampler(void **state)
{
    (void)state;
    uint32_t a[1000], b[1000];
    st_epoch_order(a, 1000, 5, 0);
    st_epoch_order(b, 1000, 5, 0);
    assert_memory_equal(a, b, sizeof a);  /* seeded */
    st_epoch_order(b, 1000, 5, 1);
    assert_true(memcmp(a, b, sizeof a) != 0);  /* reshuffled every epoch */
    char seen[1000] = {0};
    for (int i = 0; i < 1000; i++) {
        assert_true(a[i] < 1000);
        assert_int_equal(seen[a[i]]++, 0);  /* a permutation */
    }
}

/* ---------------------------------------------------------- checkpoints -- */

static void test_checkpoint_format_and_corruption(void **state)
{
    (void)state;
    float p[5] = {1, 2, 3, 4, 5}, o[5] = {0.5f, 0, 0, 0, 1};
    st_ckpt c = {.model_text = "input 1 1 1\nlinear 5\n", .params = p, .nparams = 5, .optim_state = o, .noptim = 5,
                 .epoch = 3, .epoch_pos = 640, .step = 99, .seed = 7, .world_size = 2};
    char path[512];
    path_of(path, sizeof path, "unit.ckpt");
    assert_int_equal(st_ckpt_write(path, &c), ST_OK);
    st_ckpt r = read_ckpt("unit.ckpt");
    assert_string_equal(r.model_text, c.model_text);
    assert_int_equal(r.nparams, 5);
    assert_memory_equal(r.params, p, sizeof p);
    assert_int_equal(r.step, 99);
    assert_int_equal(r.epoch_pos, 640);
    st_ckpt_free(&r);

    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    uint8_t *bytes = malloc((size_t)sb.st_size);
    FILE *f = fopen(path, "rb");
    assert_int_equal(fread(bytes, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    const struct {
        const char *name, *fragment;
        size_t len;
        long flip;
    } bad[] = {{"truncated.ckpt", "truncated", (size_t)sb.st_size - 9, -1},
               {"flipped.ckpt", "checksum mismatch", (size_t)sb.st_size, 60},
               {"magic.ckpt", "not a shmtrain checkpoint", (size_t)sb.st_size, 2},
               {"tiny.ckpt", "not a shmtrain checkpoint", 10, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (bad[i].flip >= 0)
            bytes[bad[i].flip] ^= 0x40;
        write_bytes(bad[i].name, bytes, bad[i].len);
        if (bad[i].flip >= 0)
            bytes[bad[i].flip] ^= 0x40;
        char bp[512];
        path_of(bp, sizeof bp, bad[i].name);
        st_ckpt x;
        assert_int_equal(st_ckpt_read(bp, &x), ST_ERR_FORMAT);
        if (!strstr(st_last_error(), bad[i].fragment) || !strstr(st_last_error(), bad[i].name))
            fail_msg("%s: '%s'", bad[i].name, st_last_error());
    }
    free(bytes);
    /* A write into a directory that does not exist fails and leaves nothing. */
    char nowhere[600];
    snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/x.ckpt", tr_dir);
    assert_int_equal(st_ckpt_write(nowhere, &c), ST_ERR_IO);
}

/* ----------------------------------------------------------- training -- */

/* 2 x 16 and 1 x 16 x 2 micro-batches against 1 x 32: the same images a
 * step, their gradients summed in another order. */
static void test_two_instances_equal_one_with_double_batch(void **state)
{
    (void)state;
    struct child_run a = train(2, "a.ckpt", (char *[]){"--batch-size", "16", "--max-steps", "50", "--momentum", "0",
                                                 "--check-replicas", "10", NULL}, 0);
    if (a.code != 0)
        fail_msg("2 x 16 failed: %s", a.err);
    struct child_run b = train(1, "b.ckpt", (char *[]){"--batch-size", "32", "--max-steps", "50", "--momentum", "0",
                                                 NULL}, 0);
    if (b.code != 0)
        fail_msg("1 x 32 failed: %s", b.err);
    /* and one instance accumulating two micro-batches of 16 (--grad-accum):
     * the same 32 images a step as the others */
    struct child_run c = train(1, "c.ckpt", (char *[]){"--batch-size", "16", "--grad-accum", "2", "--max-steps", "50",
                                                 "--momentum", "0", NULL}, 0);
    if (c.code != 0)
        fail_msg("1 x 16 x 2 failed: %s", c.err);
    st_ckpt ca = read_ckpt("a.ckpt"), cb = read_ckpt("b.ckpt"), cc = read_ckpt("c.ckpt");
    assert_int_equal(ca.step, 50);
    assert_int_equal(cb.step, 50);
    assert_int_equal(cc.step, 50);
    assert_int_equal(ca.epoch_pos, cb.epoch_pos);
    assert_int_equal(cc.epoch_pos, cb.epoch_pos);
    const st_ckpt *others[] = {&ca, &cc};
    for (int k = 0; k < 2; k++) {
        double scale, worst = ckpt_max_abs_diff(others[k], &cb, &scale);
        if (!(worst < 1e-4 * scale + 1e-6))
            fail_msg("%s: parameters differ by %.3g (scale %.3g) after 50 steps", k ? "1 x 16 x 2" : "2 x 16",
                     worst, scale);
    }
    st_ckpt_free(&ca), st_ckpt_free(&cb), st_ckpt_free(&cc);
    child_run_free(&a), child_run_free(&b), child_run_free(&c);
}

static void test_deterministic_and_resumable(void **state)
{
    (void)state;
    char *twice[] = {"--epochs", "2", "--batch-size", "32", "--seed", "3", NULL};
    struct child_run r1 = train(2, "det1.ckpt", twice, 0), r2 = train(2, "det2.ckpt", twice, 0);
    assert_int_equal(r1.code, 0);
    assert_int_equal(r2.code, 0);
    st_ckpt a = read_ckpt("det1.ckpt"), b = read_ckpt("det2.ckpt");
    assert_int_equal(a.nparams, b.nparams);
    assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));  /* bitwise, run to run */
    assert_memory_equal(a.optim_state, b.optim_state, a.noptim * sizeof(float));

    /* One epoch, stop; resume for the second: the same bits as two straight. */
    struct child_run h1 = train(2, "half.ckpt", (char *[]){"--epochs", "1", "--batch-size", "32", "--seed", "3", NULL}, 0);
    assert_int_equal(h1.code, 0);
    struct child_run h2 = train(2, "half.ckpt", (char *[]){"--epochs", "2", "--batch-size", "32", "--seed", "3",
                                                     "--resume", NULL}, 0);
    if (h2.code != 0)
        fail_msg("resume failed: %s", h2.err);
    st_ckpt c = read_ckpt("half.ckpt");
    assert_int_equal(c.step, a.step);
    assert_memory_equal(c.params, a.params, a.nparams * sizeof(float));
    assert_memory_equal(c.optim_state, a.optim_state, a.noptim * sizeof(float));
    st_ckpt_free(&c);

    /* Resume with a different number of instances: continues where it was. */
    struct child_run o1 = train(2, "other.ckpt", (char *[]){"--epochs", "1", "--batch-size", "32", "--seed", "3", NULL}, 0);
    /* "--resume FILE", with a space, as --help shows it and users type it. */
    struct child_run o2 = train(1, "other.ckpt", (char *[]){"--epochs", "2", "--batch-size", "32", "--seed", "3",
                                                      "--resume", "other.ckpt", NULL}, 0);
    if (o1.code != 0 || o2.code != 0)
        fail_msg("resume with 1 instance failed: %s", o2.err);
    c = read_ckpt("other.ckpt");
    assert_int_equal(c.epoch, 2);
    assert_int_equal(c.world_size, 1);
    assert_true(c.step > a.step);  /* epoch 2 ran with 1 x 32 samples per step */
    st_ckpt_free(&c);

    /* A checkpoint of another model is refused, and not overwritten. */
    char path[512];
    path_of(path, sizeof path, "det1.ckpt");
    char *before = slurp_or_empty(path);
    struct stat sb;
    stat(path, &sb);
    struct child_run bad = train(1, "det1.ckpt", (char *[]){"--resume", "--model", "lenet", NULL}, 0);
    assert_int_equal(bad.code, 1);
    assert_non_null(strstr(bad.err, "was written for another model"));
    char *after = slurp_or_empty(path);
    assert_int_equal(memcmp(before, after, (size_t)sb.st_size), 0);
    free(before), free(after);
    st_ckpt_free(&a);
    st_ckpt_free(&b);
    child_run_free(&r1), child_run_free(&r2), child_run_free(&h1), child_run_free(&h2), child_run_free(&o1), child_run_free(&o2), child_run_free(&bad);
}

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
    char *after = slurp_or_empty(path);
    assert_string_equal(before, after);
    free(before), free(after);
    child_run_free(&good), child_run_free(&boom);
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
    assert_int_equal(r.code, 1);
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
        if (r.code != 1 || !strstr(r.err, binary[i].want) || !strstr(r.err, "binary.model"))
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
                 {{"--batch-size", "4294967312"}, "--batch-size 4294967312: must be at most"},
                 {{"--epochs", "4294967297"}, "--epochs 4294967297: must be at most"},
                 {{"--train-subset", "99999999999999999999"}, "--train-subset 99999999999999999999: must be at most"},
                 {{"--seed", "18446744073709551617"}, "--seed 18446744073709551617: must be at most"},
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

/* An evaluation scores the test set, every sample once, over however many
 * instances and whatever the batch (issue 33): its record counts the
 * predictions.  The synthetic test set has 512 samples; the subsets are and
 * are not multiples of instances x batch. */
static void test_evaluation_scores_the_test_set_once(void **state)
{
    (void)state;
    const struct {
        int instances;
        const char *batch, *subset;
        unsigned long long want;
    } cases[] = {{2, "64", "512", 512}, {2, "64", "500", 500}, {1, "7", "300", 300}, {2, "5", "33", 33},
                 {2, "16", "40", 40}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char metrics[512];
        path_of(metrics, sizeof metrics, "metrics.jsonl");
        unlink(metrics);
        struct child_run r = train(cases[i].instances, "eval.ckpt",
                                   (char *[]){"--max-steps", "1", "--batch-size", (char *)cases[i].batch,
                                              "--test-subset", (char *)cases[i].subset, NULL},
                                   0);
        assert_int_equal(r.code, 0);
        char *text = slurp_or_empty(metrics);
        const char *eval = strstr(text, "\"type\":\"eval\""), *at = eval ? strstr(eval, "\"predictions\":") : NULL;
        if (!at || strtoull(at + strlen("\"predictions\":"), NULL, 10) != cases[i].want)
            fail_msg("%d x batch %s, %s test samples: %s", cases[i].instances, cases[i].batch, cases[i].subset,
                     at ? at : "no predictions in the eval record");
        /* The accuracy is a count of right answers over those predictions
         * (written to 5 decimals: 0.00001 x 512 is the rounding's reach). */
        const char *acc_at = strstr(eval, "\"test_accuracy\":");
        assert_non_null(acc_at);
        const double right = strtod(acc_at + strlen("\"test_accuracy\":"), NULL) * (double)cases[i].want;
        if (fabs(right - round(right)) > 0.006)
            fail_msg("%s test samples: accuracy x predictions = %.4f, not a whole number of right answers",
                     cases[i].subset, right);
        free(text);
        child_run_free(&r);
    }
}

/* --scale-lr multiplies the learning rate by the instances (Goyal et al.'s
 * rule), as the train record reports; a resume under another --seed is
 * refused (the epoch order would not continue). */
static void test_scale_lr_and_resume_seed(void **state)
{
    (void)state;
    char metrics[512];
    path_of(metrics, sizeof metrics, "metrics.jsonl");
    unlink(metrics);
    struct child_run r = train(2, "seed.ckpt",
                               (char *[]){"--max-steps", "2", "--lr", "0.01", "--scale-lr", "--log-every", "1",
                                          "--seed", "1", NULL}, 0);
    assert_int_equal(r.code, 0);
    char *text = slurp_or_empty(metrics);
    const char *train_record = strstr(text, "\"type\":\"train\""), *lr = train_record ? strstr(train_record, "\"lr\":") : NULL;
    assert_non_null(lr);
    assert_float_equal(strtod(lr + strlen("\"lr\":"), NULL), 0.02, 1e-9);
    free(text);
    child_run_free(&r);
    r = train(2, "seed.ckpt", (char *[]){"--max-steps", "4", "--resume", "--seed", "2", NULL}, 0);
    assert_int_not_equal(r.code, 0);
    if (!strstr(r.err, "written with --seed 1, not 2") && !strstr(r.out, "written with --seed 1, not 2"))
        fail_msg("resume under another seed: %s", r.err);
    child_run_free(&r);
}

static void test_metrics_file(void **state)
{
    (void)state;
    struct child_run r = train(2, "m.ckpt", (char *[]){"--epochs", "5", "--max-steps", "20", "--log-every", "10", NULL}, 0);
    assert_int_equal(r.code, 0);
    char path[512];
    path_of(path, sizeof path, "metrics.jsonl");
    char *m = slurp_or_empty(path);
    assert_non_null(strstr(m, "{\"type\":\"train\",\"step\":10,"));
    assert_non_null(strstr(m, "\"allreduce_s\":"));
    assert_non_null(strstr(m, "\"wait_s\":"));
    assert_non_null(strstr(m, "{\"type\":\"eval\",\"step\":20,"));
    assert_non_null(strstr(m, "{\"type\":\"summary\",\"steps\":20,\"instances\":2,"));
    free(m);
    child_run_free(&r);
}

/* The step budget (issue 27): --max-steps alone trains that many steps
 * whatever the epochs (2,048 samples at batch 64: 32 steps an epoch, so 80
 * is 2.5 epochs; it used to stop at 32, the default one epoch); with
 * --epochs too, whichever ends first; the start line says which. */
static void test_max_steps_is_the_budget(void **state)
{
    (void)state;
    struct data_files d = synthetic_files();
    char ckpt[512];
    path_of(ckpt, sizeof ckpt, "budget.ckpt");
    static const struct {
        const char *epochs;  /* NULL: not given */
        long steps;
        const char *line;
    } runs[] = {
        {NULL, 80, "80 steps (--max-steps; 2.5 epochs of 32 steps)"},
        {"1", 32, "1 epoch of 32 steps (--epochs, before --max-steps)"},
        {"5", 80, "80 steps (--max-steps; 2.5 epochs of 32 steps)"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        unlink(ckpt);
        char *argv[24] = {(char *)tr_shmtrain, "--model", "mlp", "--train-images", d.tri, "--train-labels", d.trl,
                          "--test-images", d.tei, "--test-labels", d.tel, "--batch-size", "64", "--max-steps", "80",
                          "--log-every", "1000", "--checkpoint", ckpt};
        if (runs[i].epochs) {
            argv[19] = "--epochs";
            argv[20] = (char *)runs[i].epochs;
        }
        struct child_run r = run_argv(argv, 0);
        if (r.code != 0 || !strstr(r.out, runs[i].line))
            fail_msg("--max-steps 80%s%s: exit %d, start line not saying '%s': %s", runs[i].epochs ? " --epochs " : "",
                     runs[i].epochs ? runs[i].epochs : "", r.code, runs[i].line, r.out);
        st_ckpt c;
        assert_int_equal(st_ckpt_read(ckpt, &c), ST_OK);
        assert_int_equal(c.step, runs[i].steps);
        st_ckpt_free(&c);
        child_run_free(&r);
    }
}

/* A model's train line is its recipe: shmtrain trains with it when no flag
 * says otherwise, a flag given overrides its value, and the start line and
 * the run record say what was used. */
static void test_model_recipe_and_its_override(void **state)
{
    (void)state;
    struct data_files d = synthetic_files();
    char model[512], metrics[512];
    path_of(model, sizeof model, "recipe.model");
    path_of(metrics, sizeof metrics, "recipe.jsonl");
    FILE *f = fopen(model, "w");
    assert_non_null(f);
    fputs("train optimizer adamw lr 2e-3 weight-decay 0.05 batch-size 32\ninput 1 28 28\nflatten\nlinear 10\n", f);
    fclose(f);
    static const struct {
        const char *flags[5];
        const char *line, *batch, *record;
    } runs[] = {
        {{NULL}, "adamw lr 0.002 constant weight-decay 0.05", "x batch 32,", "\"recipe\":\"adamw lr 0.002 constant weight-decay 0.05\""},
        {{"--optimizer", "sgd", "--lr", "0.5", NULL}, "sgd lr 0.5 momentum 0.9 constant weight-decay 0.05", "x batch 32,",
         "\"recipe\":\"sgd lr 0.5 momentum 0.9 constant weight-decay 0.05\""},
        {{"--batch-size", "16", NULL}, "adamw lr 0.002", "x batch 16,", "\"recipe\":\"adamw lr 0.002"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        unlink(metrics);
        char *argv[32] = {(char *)tr_shmtrain, "--model", model, "--train-images", d.tri, "--train-labels", d.trl,
                          "--test-images", d.tei, "--test-labels", d.tel, "--max-steps", "3", "--metrics", metrics};
        int k = 15;
        for (int j = 0; runs[i].flags[j]; j++)
            argv[k++] = (char *)runs[i].flags[j];
        struct child_run r = run_argv(argv, 0);
        char *m = slurp_or_empty(metrics);
        if (r.code != 0 || !strstr(r.out, runs[i].line) || !strstr(r.out, runs[i].batch) || !strstr(m, runs[i].record))
            fail_msg("run %zu: exit %d; want '%s', '%s' and the record's %s; got: %s / %s", i, r.code, runs[i].line,
                     runs[i].batch, runs[i].record, r.out[0] ? r.out : r.err, m);
        free(m);
        child_run_free(&r);
    }
}

/* shmtrain export: the safetensors layout byte for byte (header length,
 * the header's entry for a tensor, padding to 8, the data where its offsets
 * say and equal to the checkpoint's parameters bit for bit, nothing after);
 * a missing checkpoint and an unwritable destination each one line, exit 1,
 * nothing left behind. */
static void test_export_safetensors(void **state)
{
    (void)state;
    struct child_run r = train(1, "ex.ckpt", (char *[]){"--max-steps", "3", NULL}, 0);
    assert_int_equal(r.code, 0);
    child_run_free(&r);
    char ckpt[512], out[512];
    path_of(ckpt, sizeof ckpt, "ex.ckpt");
    path_of(out, sizeof out, "ex.safetensors");
    r = run_argv((char *[]){(char *)tr_shmtrain, "export", "--checkpoint", ckpt, "--out", out, NULL}, 0);
    assert_int_equal(r.code, 0);
    child_run_free(&r);
    st_ckpt c;
    assert_int_equal(st_ckpt_read(ckpt, &c), ST_OK);
    FILE *f = fopen(out, "rb");
    assert_non_null(f);
    uint64_t n;
    assert_int_equal(fread(&n, sizeof n, 1, f), 1);
    assert_int_equal(n % 8, 0);
    char *header = calloc(1, n + 1);
    assert_int_equal(fread(header, 1, n, f), n);
    /* mlp: flatten, then the first linear layer is nn.Sequential's module 1 */
    assert_non_null(strstr(header, "\"1.weight\":{\"dtype\":\"F32\",\"shape\":[256,784],\"data_offsets\":[0,802816]}"));
    assert_non_null(strstr(header, "\"5.bias\":{\"dtype\":\"F32\",\"shape\":[10],"));
    assert_non_null(strstr(header, "\"step\":\"3\""));
    float *data = malloc(c.nparams * sizeof *data);
    assert_int_equal(fread(data, sizeof *data, c.nparams, f), c.nparams);
    assert_memory_equal(data, c.params, c.nparams * sizeof *data);  /* mlp's layers in flat order */
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    free(data), free(header);
    st_ckpt_free(&c);
    char missing[512];
    path_of(missing, sizeof missing, "no-such.ckpt");
    r = run_argv((char *[]){(char *)tr_shmtrain, "export", "--checkpoint", missing, "--out", out, NULL}, 0);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "no-such.ckpt"));
    child_run_free(&r);
    r = run_argv((char *[]){(char *)tr_shmtrain, "export", "--checkpoint", ckpt, "--out", "/nonexistent/x.safetensors",
                            NULL}, 0);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "--out /nonexistent/x.safetensors"));
    child_run_free(&r);
}

/* Export, then --init-from: the same parameters bit for bit (one step at
 * lr 0 changes nothing), for mlp and lenet; another model's file refused by
 * the tensor that does not fit, and a file another shape's. */
static void test_init_from_round_trip(void **state)
{
    (void)state;
    const char *models[] = {"mlp", "lenet"};
    char out[512], ckpt[512], again[512];
    path_of(out, sizeof out, "rt.safetensors");
    path_of(ckpt, sizeof ckpt, "rt.ckpt");
    path_of(again, sizeof again, "rt2.ckpt");
    for (int i = 0; i < 2; i++) {
        struct child_run r = train(1, "rt.ckpt", (char *[]){"--model", (char *)models[i], "--max-steps", "3", NULL}, 0);
        assert_int_equal(r.code, 0);
        child_run_free(&r);
        r = run_argv((char *[]){(char *)tr_shmtrain, "export", "--checkpoint", ckpt, "--out", out, NULL}, 0);
        assert_int_equal(r.code, 0);
        child_run_free(&r);
        r = train(1, "rt2.ckpt", (char *[]){"--model", (char *)models[i], "--init-from", out, "--max-steps", "1", "--lr",
                                             "0", NULL}, 0);
        if (r.code != 0)
            fail_msg("%s --init-from: exit %d: %s", models[i], r.code, r.err);
        child_run_free(&r);
        st_ckpt a = read_ckpt("rt.ckpt"), b = read_ckpt("rt2.ckpt");
        assert_int_equal(a.nparams, b.nparams);
        assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));
        st_ckpt_free(&a), st_ckpt_free(&b);
    }
    /* lenet's file into mlp: its first tensor is not mlp's */
    struct child_run r = train(1, "rt3.ckpt", (char *[]){"--model", "mlp", "--init-from", out, "--max-steps", "1", NULL}, 0);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "--init-from"));
    assert_non_null(strstr(r.err, "is not one of this model's"));
    child_run_free(&r);
    /* the same names at another shape: lenet with 8 first filters */
    char model[512];
    path_of(model, sizeof model, "lenet8.model");
    FILE *f = fopen(model, "w");
    assert_non_null(f);
    fputs("input 1 28 28\nconv 8 k5 p2\nrelu\nmaxpool k2 s2\nconv 16 k5\nrelu\nmaxpool k2 s2\nflatten\nlinear 120\n"
          "relu\nlinear 84\nrelu\nlinear 10\n", f);
    fclose(f);
    r = train(1, "rt3.ckpt", (char *[]){"--model", model, "--init-from", out, "--max-steps", "1", NULL}, 0);
    assert_int_equal(r.code, 1);
    if (!strstr(r.err, "0.weight is 6x1x5x5, the model's is 8x1x5x5"))
        fail_msg("another shape: %s", r.err);
    child_run_free(&r);
}

static void test_converges_on_fashion_mnist(void **state)
{
    (void)state;
    const char *fm = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    if (access(fm, R_OK) != 0) {
        printf("skipped: %s is absent (scripts/install-deps.sh installs dataset-fashion-mnist)\n", fm);
        skip();
    }
    char *argv[] = {(char *)tr_shmrun, "-n", "2", "--quiet", "--log-dir", "logs", "--", (char *)tr_shmtrain, "--model",
                    "lenet", "--train-subset", "12800", "--test-subset", "2000", "--epochs", "3", "--quiet",
                    "--checkpoint", "fm.ckpt", "--metrics", "fm.jsonl", NULL};
    struct child_run r = run_argv(argv, 0);
    if (r.code != 0)
        fail_msg("training failed: %s", r.err);
    char path[512];
    path_of(path, sizeof path, "fm.jsonl");
    char *m = slurp_or_empty(path), *s = strstr(m, "\"best_test_accuracy\":");
    assert_non_null(s);
    double best = atof(s + strlen("\"best_test_accuracy\":"));
    if (!(best >= 0.78))
        fail_msg("best test accuracy %.4f < 0.78 after 3 epochs on 12,800 samples", best);
    free(m);
    child_run_free(&r);
}

static int setup(void **state)
{
    (void)state;
    if (trainrun_setup("test_train") != 0)
        return -1;
    trainrun_images();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return trainrun_teardown();
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_readers_refuse_bad_files),
        cmocka_unit_test(test_cifar_reader),
        cmocka_unit_test(test_sampler_shards_like_distributed_sampler),
        cmocka_unit_test(test_checkpoint_format_and_corruption),
        cmocka_unit_test(test_two_instances_equal_one_with_double_batch),
        cmocka_unit_test(test_deterministic_and_resumable),
        cmocka_unit_test(test_nan_stops_and_keeps_the_checkpoint),
        cmocka_unit_test(test_ctrl_c_checkpoints_and_exits),
        cmocka_unit_test(test_no_thread_runs_a_signal_handler),
        cmocka_unit_test(test_bad_inputs_name_their_file),
        cmocka_unit_test(test_bad_data_blames_the_rank_that_failed),
        cmocka_unit_test(test_stale_checkpoint_temporaries_are_removed),
        cmocka_unit_test(test_bf16_gradient_exchange),
        cmocka_unit_test(test_bucketed_overlap),
        cmocka_unit_test(test_two_nodes_equal_one_node_of_two),
        cmocka_unit_test(test_killed_rank_stops_every_node),
        cmocka_unit_test(test_metrics_file),
        cmocka_unit_test(test_max_steps_is_the_budget),
        cmocka_unit_test(test_model_recipe_and_its_override),
        cmocka_unit_test(test_export_safetensors),
        cmocka_unit_test(test_init_from_round_trip),
        cmocka_unit_test(test_evaluation_scores_the_test_set_once),
        cmocka_unit_test(test_scale_lr_and_resume_seed),
        cmocka_unit_test(test_converges_on_fashion_mnist),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, setup, teardown);
}
