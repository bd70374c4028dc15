/* The trainer end to end: equivalence of N x b with 1 x Nb,
 * determinism, resume, metrics, the step budget, recipes, the export,
 * evaluation, convergence on Fashion-MNIST.  Elsewhere: a run that goes
 * wrong (NaN, Ctrl-C, bad input, a failing rank): test_train_faults.c;
 * shmrun --sweep over real training runs: test_train_sweep.c; the gradient
 * exchange (bf16 on the wire, buckets, nodes): test_exchange.c; the data
 * readers and the checkpoint format they build on: test_readers.c. */
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

/* --clip-norm: one plain SGD step from the same start with clips of 0.01,
 * 0.02 and 0.04 (mlp's gradient norm at its start is far above them) moves
 * the parameters along the same direction by lr x clip: the runs differ by
 * lr x 0.01 and lr x 0.02 in L2, a ratio of 2 (to fp32 round-off: each
 * parameter is ~0.1, its steps ~1e-4 of it, so 1e-3 of the ratio). */
static double l2_apart(const st_ckpt *a, const st_ckpt *b)
{
    double sum = 0;
    for (size_t i = 0; i < a->nparams; i++)
        sum += ((double)a->params[i] - b->params[i]) * ((double)a->params[i] - b->params[i]);
    return sqrt(sum);
}

static void test_clip_norm_bounds_the_step(void **state)
{
    (void)state;
    const char *clips[] = {"0.01", "0.02", "0.04"}, *names[] = {"clip1.ckpt", "clip2.ckpt", "clip4.ckpt"};
    st_ckpt c[3];
    for (int k = 0; k < 3; k++) {
        struct child_run r = train(1, names[k], (char *[]){"--batch-size", "16", "--max-steps", "1", "--momentum", "0",
                                                           "--weight-decay", "0", "--clip-norm", (char *)clips[k],
                                                           NULL}, 0);
        if (r.code != 0)
            fail_msg("--clip-norm %s failed: %s", clips[k], r.err);
        child_run_free(&r);
        c[k] = read_ckpt(names[k]);
    }
    const double near = l2_apart(&c[0], &c[1]), far = l2_apart(&c[1], &c[2]);
    print_message("--clip-norm 0.01 / 0.02 / 0.04: one step apart by %.6g and %.6g\n", near, far);
    if (!(near > 0) || !(fabs(far / near - 2) < 1e-3))
        fail_msg("one step under clips of 0.01, 0.02, 0.04: %.6g and %.6g apart, not a ratio of 2", near, far);
    for (int k = 0; k < 3; k++)
        st_ckpt_free(&c[k]);
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
                 {2, "16", "40", 40}, {2, "64", "10", 10}, {2, "16", "3", 3}};  /* the last two: less than a
                                                                        global batch, rank 1 scoring none */
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

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_instances_equal_one_with_double_batch),
        cmocka_unit_test(test_clip_norm_bounds_the_step),
        cmocka_unit_test(test_deterministic_and_resumable),
        cmocka_unit_test(test_metrics_file),
        cmocka_unit_test(test_max_steps_is_the_budget),
        cmocka_unit_test(test_model_recipe_and_its_override),
        cmocka_unit_test(test_export_safetensors),
        cmocka_unit_test(test_init_from_round_trip),
        cmocka_unit_test(test_evaluation_scores_the_test_set_once),
        cmocka_unit_test(test_scale_lr_and_resume_seed),
        cmocka_unit_test(test_converges_on_fashion_mnist),
    };
    return TRAINRUN_GROUP("test_train", tests, argc, argv);
}
