/* --balance dynamic against static, end to end: 3 instances on this
 * machine's cores (2 here: two share one, the straggler dynamic balance is
 * for), 4 micro-batches each a step, for mlp, cnn and gpt-mini.  Each run
 * counts every step's micro-batches (the summary's micro_batches: steps x
 * 3 x 4, each step checked by the trainer), keeps its replicas bitwise
 * equal (--check-replicas), and ends at static's loss; once warm, a step
 * faults no page in (the train records' page_faults); a killed instance
 * stops the gang and leaves nothing, a bad --balance is named.
 *
 * The tolerance: dynamic sums the same 12 micro-batch gradients of a step
 * in another order (which rank adds which, then the exchange), a
 * difference of fp32 round-off (~1e-7 relative) a step that training
 * carries forward.  Measured here (2-vCPU Xeon): after 3 steps every model's
 * parameters are within 3e-7 of their scale, and after 200 steps mlp's and
 * cnn's within 3e-8 with the same loss to 6 digits; gpt-mini's AdamW
 * carries round-off further (see its test): its loss within 0.3-0.5%.  So:
 * 1e-5 of the parameters' scale after 3 steps (a sample taken from the
 * wrong slot, a micro-batch summed twice or a wrong mean move them by
 * 1e-4 and more), 1e-5 after 200 for mlp and cnn, and gpt-mini's loss
 * within 2% after 200. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accum.h"
#include "steptimes.h"
#include "trainrun.h"
#include "shmtrain/data.h"
#include "shmtrain/metrics.h"

enum { RANKS = 3, ACCUM = 4 };
/* AddressSanitizer's quarantine hands every allocation fresh memory (a
 * step that frees and allocates, as the text reader's per-batch set, then
 * faults pages in), and its shadow memory is faulted in as it is first
 * checked: the fault counts are asserted without it. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif
/* gpt-mini learns real text (a made-up grammar's floor is reached within
 * the run, where the loss is round-off's to pick: 4% apart, measured) */
#define CORPUS "/usr/share/games/fortunes"

/* The run's last eval and summary records, from tr_dir/metrics.jsonl. */
struct outcome {
    double loss;
    double faults[64];          /* each train record's page faults a step (-1: not said) */
    int train_records;
    st_summary_record summary;
    st_run_record run;
    st_instance_record instances[8];
    int ninstances;
};

static struct outcome read_outcome(void)
{
    char path[512];
    path_of(path, sizeof path, "metrics.jsonl");
    char *text = slurp_or_empty(path);
    struct outcome o = {.loss = NAN};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        st_record r;
        switch (st_metrics_parse(line, &r)) {
        case ST_RECORD_EVAL: o.loss = r.u.eval.test_loss; break;
        case ST_RECORD_TRAIN:
            if (o.train_records < 64)
                o.faults[o.train_records++] = r.u.train.faults_said ? r.u.train.page_faults : -1;
            break;
        case ST_RECORD_SUMMARY: o.summary = r.u.summary; break;
        case ST_RECORD_RUN: o.run = r.u.run; break;
        case ST_RECORD_INSTANCE:
            if (o.ninstances < 8)
                o.instances[o.ninstances++] = r.u.instance;
            break;
        default: break;
        }
    }
    free(text);
    return o;
}

/* shmrun -n 3 -- shmtrain MODEL ... --grad-accum 4 --balance HOW, to `ckpt`. */
static struct outcome run_with(const char *model, const char *how, const char *ckpt, const char *steps,
                               const char *bucket_mb)
{
    /* a slow learning rate: the synthetic images' loss still far from 0 after 200 steps */
    char *images[] = {"--model", (char *)model, "--batch-size", "8", "--grad-accum", "4", "--balance", (char *)how,
                      "--max-steps", (char *)steps, "--eval-every", "0", "--check-replicas", "25", "--lr", "0.002",
                      "--momentum", "0", bucket_mb ? "--bucket-mb" : NULL, (char *)bucket_mb, NULL};
    struct child_run r;
    if (strcmp(model, "gpt-mini") != 0) {
        r = train(RANKS, ckpt, images, 0);
    } else {
        r = run_argv((char *[]){(char *)tr_shmrun, "-n", "3", "--oversubscribe", "--quiet", "--log-dir", "logs", "--",
                                (char *)tr_shmtrain, "--model", "gpt-mini", "--text", CORPUS, "--batch-size", "2",
                                "--grad-accum", "4", "--balance", (char *)how, "--max-steps", (char *)steps,
                                "--eval-windows", "32", "--lr", "1e-3", "--warmup", "0", "--schedule", "constant",
                                "--check-replicas", "25", "--checkpoint", (char *)ckpt, "--metrics", "metrics.jsonl",
                                "--quiet", "--overwrite", NULL},
                     0);
    }
    if (r.code != 0)
        fail_msg("%s --balance %s failed (%d): %s", model, how, r.code, r.err);
    struct outcome o = read_outcome();
    child_run_free(&r);
    return o;
}

static struct outcome run(const char *model, const char *how, const char *ckpt, const char *steps)
{
    return run_with(model, how, ckpt, steps, NULL);
}

/* Every instance's step times, one record each (rank 0 writes them): the
 * structure, not the speed: each instance's steps, its quantiles in order,
 * its parts within its steps' time. */
static void check_instances(const char *model, const struct outcome *o, long steps)
{
    if (o->ninstances != RANKS)
        fail_msg("%s: %d instance records, not %d", model, o->ninstances, RANKS);
    for (int k = 0; k < RANKS; k++) {
        const st_instance_record *r = &o->instances[k];
        const double total = r->compute_s + r->exchange_s;
        if (!(r->rank == k && r->steps == steps && r->step_p50_s > 0 && r->step_p50_s <= r->step_p90_s &&
              r->step_p90_s <= r->step_max_s && r->wait_s >= 0 && r->wait_s <= r->exchange_s + 1e-3 &&
              total <= steps * r->step_max_s * 1.001 + 1e-3 && total >= steps * r->step_p50_s * 0.3))
            fail_msg("%s: instance %d: rank %d, %ld steps, p50 %.6f p90 %.6f max %.6f s, compute %.4f exchange "
                     "%.4f wait %.4f s", model, k, r->rank, r->steps, r->step_p50_s, r->step_p90_s, r->step_max_s,
                     r->compute_s, r->exchange_s, r->wait_s);
    }
}

/* `loss_tol`: the final losses' relative distance allowed; `param_tol`:
 * the parameters', of their largest (0: not compared; see the top). */
static void same_training(const char *model, const char *steps, double loss_tol, double param_tol)
{
    const long n = atol(steps);
    struct outcome s = run(model, "static", "s.ckpt", steps), d = run(model, "dynamic", "d.ckpt", steps);
    check_instances(model, &s, n);
    check_instances(model, &d, n);
    assert_string_equal(s.run.balance, "static");
    assert_string_equal(d.run.balance, "dynamic");
    /* counted: every micro-batch of every step computed once, over the gang */
    assert_int_equal(s.summary.micro_batches, n * RANKS * ACCUM);
    assert_int_equal(d.summary.micro_batches, n * RANKS * ACCUM);
    assert_int_equal(s.summary.micro_batches_here, n * ACCUM);
    assert_in_range(d.summary.micro_batches_here, 0, n * RANKS * ACCUM);
    st_ckpt a = read_ckpt("s.ckpt"), b = read_ckpt("d.ckpt");
    assert_int_equal(a.step, n);
    assert_int_equal(b.step, n);
    assert_int_equal(a.epoch_pos, b.epoch_pos);
    double scale, worst = ckpt_max_abs_diff(&b, &a, &scale);
    print_message("%s, %ld steps: losses %.6f (static) %.6f (dynamic); parameters apart by %.3g of %.3g; rank 0 "
                  "computed %llu of %llu micro-batches\n", model, n, s.loss, d.loss, worst, scale,
                  (unsigned long long)d.summary.micro_batches_here, (unsigned long long)d.summary.micro_batches);
    if (!(isfinite(s.loss) && fabs(d.loss - s.loss) <= loss_tol * fabs(s.loss)))
        fail_msg("%s: dynamic's final loss %.6f, static's %.6f", model, d.loss, s.loss);
    /* Nothing allocated or touched anew a step once warm: in the second
     * half of the run no interval faults a page a step.  (Not 0: code run
     * for the first time late, at an epoch's end, faults its page or two
     * in, 0.1-0.4 a step over a 21-step interval, measured.  Dynamic's
     * warm-up can be longer: an instance on a shared core may take its
     * first micro-batches late.) */
    if (!(s.faults[0] > 10 && d.faults[0] > 10))  /* the first steps touch their buffers: counted */
        fail_msg("%s: %.1f and %.1f page faults a step in the first interval", model, s.faults[0], d.faults[0]);
    for (int k = s.train_records / 2; n >= 100 && !UNDER_ASAN && k < s.train_records; k++)
        if (!(s.faults[k] >= 0 && s.faults[k] < 1 && d.faults[k] >= 0 && d.faults[k] < 1))
            fail_msg("%s: record %d of %d: %.1f page faults a step (static), %.1f (dynamic)", model, k + 1,
                     s.train_records, s.faults[k], d.faults[k]);
    if (param_tol > 0 && !(worst <= param_tol * scale))
        fail_msg("%s: parameters differ by %.3g (scale %.3g)", model, worst, scale);
    st_ckpt_free(&a), st_ckpt_free(&b);
}

static void test_mlp_dynamic_trains_as_static(void **state)
{
    (void)state;
    same_training("mlp", "3", 1e-5, 1e-5);
    same_training("mlp", "200", 1e-4, 1e-5);
}

static void test_cnn_dynamic_trains_as_static(void **state)
{
    (void)state;
    same_training("cnn", "3", 1e-5, 1e-5);
    same_training("cnn", "200", 1e-4, 1e-5);
}

static void test_gpt_dynamic_trains_as_static(void **state)
{
    (void)state;
    if (access(CORPUS, R_OK) != 0) {
        printf("skipped: no corpus at %s (the fortunes package; scripts/install-deps.sh)\n", CORPUS);
        skip();
    }
    same_training("gpt-mini", "3", 1e-5, 1e-5);
    same_training("gpt-mini", "200", 1e-4, 5e-3);
}

/* --bucket-mb with dynamic: no bucket can go during backward (an instance
 * does not know its last micro-batch), so the whole exchange goes after it
 * and trains as static does. */
static void test_dynamic_with_buckets(void **state)
{
    (void)state;
    struct outcome s = run("mlp", "static", "s.ckpt", "3"), d = run_with("mlp", "dynamic", "d.ckpt", "3", "0.01");
    assert_int_equal(d.summary.micro_batches, 3 * RANKS * ACCUM);
    st_ckpt a = read_ckpt("s.ckpt"), b = read_ckpt("d.ckpt");
    double scale, worst = ckpt_max_abs_diff(&b, &a, &scale);
    if (!(worst <= 1e-5 * scale) || !(fabs(d.loss - s.loss) <= 1e-5 * fabs(s.loss)))
        fail_msg("dynamic with --bucket-mb: parameters apart by %.3g of %.3g, losses %.6f and %.6f", worst, scale,
                 d.loss, s.loss);
    st_ckpt_free(&a), st_ckpt_free(&b);
}

/* Resumed mid-run, dynamic goes on where static would: 100 + 100 steps end
 * where 200 in one go ended (within the same tolerance). */
static void test_dynamic_resumes(void **state)
{
    (void)state;
    struct outcome whole = run("mlp", "dynamic", "w.ckpt", "200");
    struct outcome half = run("mlp", "dynamic", "h.ckpt", "100");
    assert_int_equal(half.summary.micro_batches, 100 * RANKS * ACCUM);
    char *more[] = {"--grad-accum", "4", "--balance", "dynamic", "--batch-size", "8", "--max-steps", "200",
                    "--eval-every", "0", "--lr", "0.002", "--momentum", "0", "--resume", NULL};
    struct child_run r = train(RANKS, "h.ckpt", more, 0);
    if (r.code != 0)
        fail_msg("resume failed: %s\n%s", r.err, r.out);
    child_run_free(&r);
    struct outcome rest = read_outcome();
    assert_int_equal(rest.summary.micro_batches, 100 * RANKS * ACCUM);  /* only the steps this run made */
    if (!(fabs(rest.loss - whole.loss) <= 2e-3 * fabs(whole.loss)))
        fail_msg("resumed: final loss %.6f, in one go %.6f", rest.loss, whole.loss);
}

/* One instance killed mid-run: the gang stops, rank 1 named, nothing left. */
static size_t read_proc(const char *pid, const char *what, char *buf, size_t len)
{
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/%s", pid, what);
    FILE *f = fopen(path, "rb");  /* /proc's files say size 0: read, not stat */
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return n;
}

/* The trainer process shmrun started as `rank` of `job` (its SHMTRAIN_RANK
 * and SHMTRAIN_JOB_ID: another test's job may train beside this one). */
static bool has_var(const char *env, size_t n, const char *var)
{
    for (size_t i = 0; i < n; i += strlen(env + i) + 1)
        if (!strcmp(env + i, var))
            return true;
    return false;
}

static pid_t rank_pid(const char *job, int rank)
{
    char want[32], want_job[128];
    snprintf(want, sizeof want, "SHMTRAIN_RANK=%d", rank);
    snprintf(want_job, sizeof want_job, "SHMTRAIN_JOB_ID=%s", job);
    DIR *proc = opendir("/proc");
    pid_t found = -1;
    for (struct dirent *e; proc && found < 0 && (e = readdir(proc));) {
        char cmd[512], env[32768];
        if (!read_proc(e->d_name, "cmdline", cmd, sizeof cmd) || strcmp(cmd, tr_shmtrain) != 0)
            continue;
        const size_t n = read_proc(e->d_name, "environ", env, sizeof env);
        if (has_var(env, n, want) && has_var(env, n, want_job))
            found = (pid_t)atoi(e->d_name);
    }
    if (proc)
        closedir(proc);
    return found;
}

static void test_killed_instance_stops_the_gang(void **state)
{
    (void)state;
    char path[512];
    path_of(path, sizeof path, "metrics.jsonl");
    unlink(path);
    char job[96];
    test_job_id(job, sizeof job, "balance-kill");
    char *argv[] = {(char *)tr_shmrun, "-n", "3", "--oversubscribe", "--job-id", job, "--log-dir", "logs", "--",
                    (char *)tr_shmtrain, "--model", "cnn", "--train-images", NULL, "--train-labels", NULL,
                    "--test-images", NULL, "--test-labels", NULL, "--grad-accum", "4", "--balance", "dynamic",
                    "--batch-size", "8", "--max-steps", "100000", "--metrics", "metrics.jsonl", "--no-checkpoint",
                    "--quiet", "--overwrite", "--log-every", "1", NULL};
    struct data_files d = synthetic_files();
    argv[13] = d.tri, argv[15] = d.trl, argv[17] = d.tei, argv[19] = d.tel;
    char out[512], err_path[512];
    path_of(out, sizeof out, "kill.out");
    path_of(err_path, sizeof err_path, "kill.err");
    pid_t launcher = spawn_redirected(argv, tr_dir, out, err_path);
    assert_true(launcher > 0);
    for (int i = 0; i < 1200; i++) {  /* training under way (or the job gone: say why) */
        char *records = slurp_or_empty(path);
        const bool training = strstr(records, "\"type\":\"train\"") != NULL;
        free(records);
        int status;
        if (training)
            break;
        if (waitpid(launcher, &status, WNOHANG) == launcher || i == 1199) {
            char *err = slurp_or_empty(err_path);
            fail_msg("the run did not start training: %s", err);
        }
        usleep(50 * 1000);
    }
    pid_t victim = rank_pid(job, 1);
    assert_true(victim > 0);
    assert_int_equal(kill(victim, SIGKILL), 0);
    int status = 0, code = -1;
    for (int i = 0; i < 600 && code < 0; i++) {
        if (waitpid(launcher, &status, WNOHANG) == launcher)
            code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        else
            usleep(100 * 1000);
    }
    if (code < 0) {
        kill(launcher, SIGKILL);
        waitpid(launcher, &status, 0);
        fail_msg("the gang went on 60 s after rank 1 was killed");
    }
    assert_int_not_equal(code, 0);
    char *err = slurp_or_empty(err_path);
    if (!strstr(err, "rank 1"))
        fail_msg("shmrun did not name rank 1:\n%s", err);
    free(err);
    assert_int_equal(leftover_segments(job), 0);
}

/* The open-ended sum (accum.h): a rank's share of a step, divided by the
 * micro-batches per rank, whatever it took; none taken gives zeros, not
 * what the last step left in the buffer. */
static void test_open_ended_accumulation(void **state)
{
    (void)state;
    float grads[3] = {9, 9, 9};
    struct accum a;
    assert_int_equal(accum_init(&a, grads, 3, 4, true), ST_OK);
    for (int step = 0; step < 2; step++) {
        accum_step(&a);
        for (int m = 0; m < 3; m++) {  /* three of the four a rank would compute under static */
            accum_begin(&a, m == 2 ? 3 : m);
            for (int i = 0; i < 3; i++)
                grads[i] = (float)(m + 1) * (float)(i + 1);
            accum_add(&a);
        }
        accum_finish(&a);
        for (int i = 0; i < 3; i++)
            assert_true(grads[i] == 6.0f * (float)(i + 1) / 4.0f);  /* (1 + 2 + 3)(i + 1) / 4 */
    }
    accum_step(&a);
    accum_finish(&a);
    for (int i = 0; i < 3; i++)
        assert_true(grads[i] == 0.0f);
    accum_free(&a);
}

/* Less variance per step: an instance attaching the node's decoded data
 * has its pages entered at attach (MAP_POPULATE), so reading every image
 * in the steps faults none in (1,568 pages of 4 KiB here: 98 faults
 * without, the kernel mapping 16 pages around each).  The writing rank is the publisher, whose pages its own writes
 * touched, so the train records cannot show this: counted here. */
static double faults_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_minflt + (double)u.ru_majflt;
}

static void test_attached_data_faults_nothing_in(void **state)
{
    (void)state;
    if (UNDER_ASAN) {  /* its checks of each read fault the shadow memory in */
        printf("skipped: counts page faults, which AddressSanitizer's shadow memory adds\n");
        skip();
    }
    make_synthetic("many", 8192, 11);
    char images[512], labels[512], name[96];
    path_of(images, sizeof images, "many-images.gz");
    path_of(labels, sizeof labels, "many-labels");
    test_job_id(name, sizeof name, "populate");
    st_dataset *d = NULL, *seen = NULL;
    assert_int_equal(st_dataset_load_idx(&d, images, labels), ST_OK);
    assert_int_equal(st_dataset_share(d, name), ST_OK);
    assert_int_equal(st_dataset_attach(&seen, name), ST_OK);
    /* as the publisher does once all have attached: a failure below leaves nothing */
    assert_int_equal(st_dataset_unlink_shared(name), ST_OK);
    char left[160];
    snprintf(left, sizeof left, "/dev/shm/%s", name);
    assert_int_not_equal(access(left, F_OK), 0);
    const double before = faults_now();
    unsigned sum = 0;
    for (size_t i = 0; i < st_dataset_size(seen); i++)
        for (size_t p = 0; p < 784; p += 64)
            sum += st_dataset_image(seen, i)[p];
    const double faults = faults_now() - before;
    assert_true(sum > 0);
    print_message("reading an attached 6.4 MB dataset: %.0f page faults\n", faults);
    if (faults > 16)
        fail_msg("reading an attached 6.4 MB dataset faulted %.0f pages in", faults);
    st_dataset_destroy(seen);
    st_dataset_destroy(d);
}

/* The step-time histogram: a quantile is the first bin holding that share
 * of the steps, at most 2% above the true time, never past the slowest. */
static void test_step_time_quantiles(void **state)
{
    (void)state;
    struct step_times t = {0};
    assert_true(step_times_quantile(&t, 0.5) == 0);
    for (int i = 0; i < 10; i++)
        step_times_add(&t, 0.001, 0.0008, 0.0002, 0.0001);
    for (int i = 0; i < 10; i++)
        step_times_add(&t, 0.002, 0.0015, 0.0005, 0.0004);
    const double p50 = step_times_quantile(&t, 0.5), p55 = step_times_quantile(&t, 0.55);
    if (!(p50 >= 0.001 && p50 <= 0.00102 && p55 >= 0.002 && p55 <= 0.002))
        fail_msg("p50 %.7f (1 ms, +2%% at most), p55 %.7f (2 ms: the slowest caps it)", p50, p55);
    step_times_add(&t, 0.5, 0.1, 0.4, 0.39);
    assert_true(step_times_quantile(&t, 1.0) == 0.5 && t.max_s == 0.5 && t.steps == 21);
    assert_true(fabs(t.compute_s - (0.008 + 0.015 + 0.1)) < 1e-12 && fabs(t.wait_s - (0.001 + 0.004 + 0.39)) < 1e-12);
    const double p90 = step_times_quantile(&t, 0.9);  /* the 19th of 21: 2 ms */
    assert_true(p90 >= 0.002 && p90 <= 0.00204);
    /* an instance's own rate: its steps after the warm-up, 32 samples each */
    struct step_times w = {.warm_steps = 2};
    assert_true(step_times_steady_rate(&w, 32) == 0);
    step_times_add(&w, 0.5, 0.5, 0, 0);  /* warm-up: cold caches, first touches */
    assert_true(fabs(step_times_steady_rate(&w, 32) - 64) < 1e-9);  /* none steady yet: all of them */
    step_times_add(&w, 0.25, 0.25, 0, 0);
    for (int i = 0; i < 4; i++)
        step_times_add(&w, 0.01, 0.008, 0.002, 0.001);
    assert_true(w.steady_steps == 4 && fabs(w.steady_s - 0.04) < 1e-12);
    assert_true(fabs(step_times_steady_rate(&w, 32) - 3200) < 1e-6);
}

static void test_bad_balance_is_named(void **state)
{
    (void)state;
    struct child_run r = run_argv((char *[]){(char *)tr_shmtrain, "--model", "mlp", "--balance", "greedy", NULL}, 0);
    assert_int_not_equal(r.code, 0);
    assert_non_null(strstr(r.err, "--balance 'greedy': use static, dynamic or independent"));
    child_run_free(&r);
    r = run_argv((char *[]){(char *)tr_shmtrain, "--model", "mlp", "--balance", "independent", "--check-replicas",
                            "5", NULL}, 0);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--check-replicas: --balance independent trains a model per instance"));
    child_run_free(&r);
}

/* shmrun -n 3 -- shmtrain mlp ... --balance HOW (no --check-replicas:
 * independent models differ by design). */
static struct outcome run_plain(const char *how, const char *ckpt, const char *steps)
{
    char *args[] = {"--model", "mlp", "--batch-size", "8", "--grad-accum", "4", "--balance", (char *)how,
                    "--max-steps", (char *)steps, "--log-every", "10", "--eval-every", "0", "--lr", "0.002",
                    "--momentum", "0", NULL};
    struct child_run r = train(RANKS, ckpt, args, 0);
    if (r.code != 0)
        fail_msg("mlp --balance %s failed (%d): %s", how, r.code, r.err);
    child_run_free(&r);
    return read_outcome();
}

/* The machine's ceiling (--balance independent): no step exchanges
 * anything (counted: the all-reduce calls inside steps, 0 against static's
 * one a step), each instance trains its own model on its shard (rank 0's
 * parameters are not the averaged run's), and the run's speed is the sum
 * of every instance's own (the instance records), the sweep's ceiling. */
static void test_independent_exchanges_nothing(void **state)
{
    (void)state;
    struct outcome s = run_plain("static", "s.ckpt", "30"), i = run_plain("independent", "i.ckpt", "30");
    assert_string_equal(i.run.balance, "independent");
    assert_true(s.summary.allreduces_said && i.summary.allreduces_said);
    assert_int_equal(s.summary.step_allreduces, 30);  /* fp32, no buckets: gradients and tail in one */
    assert_int_equal(i.summary.step_allreduces, 0);
    assert_int_equal(i.summary.micro_batches, 30 * RANKS * ACCUM);
    check_instances("mlp independent", &i, 30);
    double sum = 0;
    for (int k = 0; k < i.ninstances; k++) {
        if (!(i.instances[k].samples_per_s > 0 && i.instances[k].exchange_s < 1e-3))
            fail_msg("instance %d: %.1f samples/s, %.4f s exchanging", k, i.instances[k].samples_per_s,
                     i.instances[k].exchange_s);
        sum += i.instances[k].samples_per_s;
    }
    if (!(fabs(i.summary.samples_per_s - sum) <= 0.05 * RANKS + 1e-6 * sum))  /* each written to 0.1 */
        fail_msg("the summary's %.1f samples/s is not the instances' sum %.1f", i.summary.samples_per_s, sum);
    st_ckpt a = read_ckpt("s.ckpt"), b = read_ckpt("i.ckpt");
    double scale, apart = ckpt_max_abs_diff(&b, &a, &scale);
    if (!(apart > 1e-4 * scale))  /* one shard's gradient, not the mean of three */
        fail_msg("independent rank 0's parameters within %.3g of the averaged run's (scale %.3g)", apart, scale);
    st_ckpt_free(&a), st_ckpt_free(&b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_balance_is_named),
        cmocka_unit_test(test_open_ended_accumulation),
        cmocka_unit_test(test_step_time_quantiles),
        cmocka_unit_test(test_attached_data_faults_nothing_in),
        cmocka_unit_test(test_mlp_dynamic_trains_as_static),
        cmocka_unit_test(test_cnn_dynamic_trains_as_static),
        cmocka_unit_test(test_gpt_dynamic_trains_as_static),
        cmocka_unit_test(test_dynamic_with_buckets),
        cmocka_unit_test(test_dynamic_resumes),
        cmocka_unit_test(test_independent_exchanges_nothing),
        cmocka_unit_test(test_killed_instance_stops_the_gang),
    };
    return TRAINRUN_GROUP("balance", tests, argc, argv);
}
