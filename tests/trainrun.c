/* The trainer as its users run it, for tests: see trainrun.h. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "test_half.h"
#include "trainrun.h"

const char *tr_shmrun, *tr_shmtrain;
char tr_dir[256];

void path_of(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", tr_dir, name); }

void write_bytes(const char *name, const void *p, size_t n)
{
    char path[512];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

void write_gz(const char *name, const void *p, size_t n)
{
    char path[512];
    path_of(path, sizeof path, name);
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, p, (unsigned)n), (int)n);
    gzclose(f);
}

/* IDX bytes: header + payload. */
size_t idx(uint8_t *out, uint8_t type, int ndims, const uint32_t *dims, const uint8_t *data, size_t n)
{
    out[0] = out[1] = 0;
    out[2] = type;
    out[3] = (uint8_t)ndims;
    size_t at = 4;
    for (int i = 0; i < ndims; i++) {
        out[at++] = (uint8_t)(dims[i] >> 24);
        out[at++] = (uint8_t)(dims[i] >> 16);
        out[at++] = (uint8_t)(dims[i] >> 8);
        out[at++] = (uint8_t)dims[i];
    }
    memcpy(out + at, data, n);
    return at + n;
}

/* A learnable synthetic "Fashion-MNIST": class k has a bright bar whose
 * position depends on k, plus noise. */
void make_synthetic(const char *prefix, uint32_t n, uint64_t seed)
{
    uint8_t *img = malloc((size_t)n * 784), *lab = malloc(n), *buf = malloc((size_t)n * 784 + 64);
    for (uint32_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((seed >> 33) % 10);
        lab[i] = (uint8_t)k;
        for (int p = 0; p < 784; p++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int r = p / 28, c = p % 28, noise = (int)((seed >> 40) % 60);
            bool bar = (k < 5) ? (r >= 3 + 5 * k && r < 6 + 5 * k) : (c >= 3 + 5 * (k - 5) && c < 6 + 5 * (k - 5));
            img[(size_t)i * 784 + p] = (uint8_t)(bar ? 180 + noise : noise);
        }
    }
    char name[128];
    uint32_t di[3] = {n, 28, 28}, dl[1] = {n};
    snprintf(name, sizeof name, "%s-images.gz", prefix);
    write_gz(name, buf, idx(buf, 0x08, 3, di, img, (size_t)n * 784));
    snprintf(name, sizeof name, "%s-labels", prefix);
    write_bytes(name, buf, idx(buf, 0x08, 1, dl, lab, n));
    free(img), free(lab), free(buf);
}

/* A file's text, "" when it is missing (the run wrote nothing there). */
char *slurp_or_empty(const char *path)
{
    char *s = slurp(path);
    return s ? s : strdup("");
}

/* Wait (up to a minute) until `name` in `tr_dir` holds `needle`: a process
 * that is still loading its libraries on a busy machine has no handlers yet. */
void wait_for_text(const char *name, const char *needle)
{
    char path[512];
    path_of(path, sizeof path, name);
    for (int i = 0; i < 1200; i++, usleep(50000)) {
        char *text = slurp(path);
        bool there = text && strstr(text, needle);
        free(text);
        if (there)
            return;
    }
    fail_msg("%s never showed '%s'", path, needle);
}

/* Run argv in `tr_dir`; with `interrupt_after` > 0, SIGINT it that many seconds
 * in, counted from when `ready` (a metrics file in tr_dir, or NULL) says training
 * has begun. */
struct child_run run_argv_ready(char *const argv[], double interrupt_after, const char *ready)
{
    char out[512], err[512];
    path_of(out, sizeof out, "run.out");
    path_of(err, sizeof err, "run.err");
    pid_t pid = spawn_redirected(argv, tr_dir, out, err);
    if (interrupt_after > 0) {
        if (ready)
            wait_for_text(ready, "\"type\":\"run\"");
        usleep((useconds_t)(interrupt_after * 1e6));
        kill(pid, SIGINT);
    }
    return child_collect(pid, out, err);
}

struct child_run run_argv(char *const argv[], double interrupt_after)
{
    return run_argv_ready(argv, interrupt_after, NULL);
}


struct data_files synthetic_files(void)
{
    struct data_files d;
    path_of(d.tri, sizeof d.tri, "train-images.gz");
    path_of(d.trl, sizeof d.trl, "train-labels");
    path_of(d.tei, sizeof d.tei, "test-images.gz");
    path_of(d.tel, sizeof d.tel, "test-labels");
    return d;
}

void assert_no_sweep_segments(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "! ls /dev/shm | grep -q \"^shmtrain\\.%u\\.sweep\"", (unsigned)getuid());
    assert_int_equal(system(cmd), 0);
}

/* shmrun -n N [--oversubscribe] -- shmtrain <synthetic data> <extra...> */
struct child_run train(int n, const char *ckpt, char *const extra[], double interrupt_after)
{
    char *argv[64];
    int k = 0;
    char nbuf[8];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    struct data_files d = synthetic_files();
    /* more ranks than CPUs share them (tests pass with more ranks than cores) */
    const bool share = n > sysconf(_SC_NPROCESSORS_ONLN);
    const char *base[] = {tr_shmrun, "-n", nbuf, share ? "--oversubscribe" : "--quiet", "--quiet", "--log-dir", "logs",
                          "--", tr_shmtrain, "--model", "mlp",
                          "--train-images", d.tri, "--train-labels", d.trl, "--test-images", d.tei,
                          "--test-labels", d.tel,
                          "--checkpoint", ckpt, "--metrics", "metrics.jsonl", "--quiet",
                          "--overwrite"};  /* a test's runs write over the one before, by design */
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        argv[k++] = (char *)base[i];
    for (int i = 0; extra[i]; i++)
        argv[k++] = extra[i];
    argv[k] = NULL;
    if (interrupt_after > 0) {  /* a fresh metrics file tells when training has begun */
        char path[512];
        path_of(path, sizeof path, "metrics.jsonl");
        unlink(path);
    }
    return run_argv_ready(argv, interrupt_after, "metrics.jsonl");
}

struct child_run train_with_data(int n, const char *ckpt, char *const data[])
{
    char *argv[64], nbuf[16];
    int k = 0;
    snprintf(nbuf, sizeof nbuf, "%d", n);
    const char *launch[] = {tr_shmrun, "-n", nbuf, "--oversubscribe", "--quiet", "--log-dir", "logs", "--"};
    const char *base[] = {tr_shmtrain, "--model", "mlp", "--max-steps", "30", "--checkpoint", ckpt, "--metrics",
                          "metrics.jsonl", "--overwrite", "--log-every", "1000"};
    for (size_t i = 0; n > 0 && i < sizeof launch / sizeof *launch; i++)
        argv[k++] = (char *)launch[i];
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        argv[k++] = (char *)base[i];
    for (int i = 0; data[i]; i++)
        argv[k++] = data[i];
    argv[k] = NULL;
    return run_argv(argv, 0);
}

st_ckpt trained_with_data(int n, const char *ckpt, char *const data[], char **out)
{
    struct child_run r = train_with_data(n, ckpt, data);
    if (r.code != 0)
        fail_msg("%s: exit %d: %s", ckpt, r.code, r.err);
    if (out)
        *out = strdup(r.out);
    child_run_free(&r);
    return read_ckpt(ckpt);
}

st_ckpt read_ckpt(const char *name)
{
    char path[512];
    path_of(path, sizeof path, name);
    st_ckpt c;
    if (st_ckpt_read(path, &c) != ST_OK)
        fail_msg("%s", st_last_error());
    return c;
}

double ckpt_max_abs_diff(const st_ckpt *a, const st_ckpt *b, double *scale)
{
    assert_int_equal(a->nparams, b->nparams);
    double worst = 0;
    *scale = 0;
    for (size_t i = 0; i < a->nparams; i++) {
        worst = fmax(worst, fabs((double)a->params[i] - b->params[i]));
        *scale = fmax(*scale, fabs(b->params[i]));
    }
    return worst;
}


int trainrun_setup(const char *name)
{
    tr_shmrun = getenv("SHMRUN");
    tr_shmtrain = getenv("SHMTRAIN");
    if (!tr_shmrun || !tr_shmtrain)
        return -1;
    return test_dir_create(tr_dir, sizeof tr_dir, name) != 0 ? -1 : 0;
}

void trainrun_images(void)
{
    make_synthetic("train", 2048, 1);
    make_synthetic("test", 512, 2);
}

int trainrun_teardown(void) { return test_dir_remove(tr_dir); }

/* What np.save writes: magic, version 1.0, the dict padded with spaces to
 * a multiple of 64 bytes ending in a newline, then the data. */
void write_npy(const char *name, const char *descr, const char *shape, const void *data, size_t bytes,
                      bool fortran)
{
    char dict[256];
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                       fortran ? "True" : "False", shape);
    while ((10 + len + 1) % 64)
        dict[len++] = ' ';
    dict[len++] = '\n';
    uint8_t *buf = malloc(10 + (size_t)len + bytes);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(len & 0xff), buf[9] = (uint8_t)(len >> 8);
    memcpy(buf + 10, dict, (size_t)len);
    memcpy(buf + 10 + len, data, bytes);
    write_bytes(name, buf, 10 + (size_t)len + bytes);
    free(buf);
}

static const char *group_name;

static int group_setup(void **state)
{
    (void)state;
    if (trainrun_setup(group_name) != 0)
        return -1;
    trainrun_images();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return trainrun_teardown();
}

int trainrun_group(const char *name, const struct CMUnitTest *tests, size_t count, int argc, char **argv)
{
    group_name = name;
    st_test_half(argc, argv);
    return _cmocka_run_group_tests(name, tests, count, group_setup, group_teardown);
}
