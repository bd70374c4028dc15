#define _GNU_SOURCE
/* The sweep's pure half (launcher/sweep/sweep.c): settings from a spec, merging and
 * the baseline, the interleaved order, reading recorded runs, statistics,
 * the best setting.  Its reports: test_sweep_report.c.  The real sweep runs
 * in test_train_sweep (it needs data). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "forkranks.h"
#include "sweep_fixture.h"

/* ------------------------------------------------------------ fixtures -- */

static const char *const METRICS =
    "{\"type\":\"run\",\"system\":\"shmtrain\",\"instances\":2,\"threads\":1,\"model\":\"mlp\",\"params\":100,"
    "\"batch_per_instance\":64,\"onednn\":\"2.6.3\",\"isa\":\"avx512_core\",\"precision\":\"bf16\",\"first_step\":0}\n"
    "{\"type\":\"train\",\"step\":100,\"epoch\":0.2,\"loss\":1.0,\"accuracy\":0.5,\"lr\":0.05,\"samples_per_s\":6400.0,"
    "\"time_s\":2.0,\"compute_s\":1.5,\"allreduce_s\":0.3,\"wait_s\":0.2}\n"
    "{\"type\":\"eval\",\"step\":100,\"epoch\":0,\"test_loss\":0.6,\"test_accuracy\":0.80000,\"time_s\":2.2,\"eval_s\":0.1}\n"
    "{\"type\":\"train\",\"step\":200,\"epoch\":0.4,\"loss\":0.8,\"accuracy\":0.6,\"lr\":0.05,\"samples_per_s\":25600.0,"
    "\"time_s\":2.7,\"compute_s\":0.3,\"allreduce_s\":0.1,\"wait_s\":0.04}\n"
    "{\"type\":\"train\",\"step\":300,\"epoch\":0.6,\"loss\":0.7,\"accuracy\":0.7,\"lr\":0.05,\"samples_per_s\":12800.0,"
    "\"time_s\":3.7,\"compute_s\":0.6,\"allreduce_s\":0.2,\"wait_s\":0.1}\n"
    "{\"type\":\"eval\",\"step\":300,\"epoch\":0,\"test_loss\":0.4,\"test_accuracy\":0.86000,\"time_s\":3.9,\"eval_s\":0.1}\n"
    "{\"type\":\"summary\",\"steps\":300,\"instances\":2,\"batch_per_instance\":64,\"total_s\":4.0,\"train_s\":3.6,"
    "\"samples_per_s\":10666.0,\"final_test_accuracy\":0.86,\"best_test_accuracy\":0.86,\"time_to_accuracy_s\":{\"0.80\":2.2}}\n";

static const char *const REPORT =
    "{\"job\":\"j\",\"instances\":2,\"seconds\":4.500,\"ok\":true,\"ranks\":["
    "{\"rank\":0,\"pus\":\"0\",\"exit\":0,\"signal\":0,\"max_rss_kb\":102400,\"cpu_s\":4.0,\"end_s\":4.4},"
    "{\"rank\":1,\"pus\":\"1\",\"exit\":0,\"signal\":0,\"max_rss_kb\":51200,\"cpu_s\":4.0,\"end_s\":4.5}]}\n";

#define assert_close(a, b) do {                                                   \
        double a_ = (a), b_ = (b);                                                \
        if (!(fabs(a_ - b_) <= 1e-9 * fmax(1, fabs(b_))))                         \
            fail_msg("%s = %.12g, expected %.12g", #a, a_, b_);                   \
    } while (0)

/* --------------------------------------------------------------- specs -- */

static void test_spec_items(void **state)
{
    (void)state;
    struct sweep_setting s[8];
    char err[200] = "";
    int n = sweep_parse_spec("1x2, 2x1,all,numa,l3,core", 4, s, 8, err, sizeof err);
    assert_int_equal(n, 6);
    const int want[6][2] = {{1, 2}, {2, 1}, {1, 0}, {0, 0}, {4, 0}, {0, 1}};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(s[i].req_instances, want[i][0]);
        assert_int_equal(s[i].req_cores, want[i][1]);
    }
    assert_string_equal(s[1].asked, "2x1");
    assert_string_equal(s[4].asked, "l3");
}

static void test_spec_errors(void **state)
{
    (void)state;
    struct {
        const char *spec;
        int l3;
        const char *fragment;
    } bad[] = {
        {"0x2", 1, "'0x2' is neither"},     {"2x", 1, "'2x' is neither"},       {"x2", 1, "'x2' is neither"},
        {"2x1x1", 1, "'2x1x1' is neither"}, {"fast", 1, "'fast' is neither"},   {"2x0", 1, "'2x0' is neither"},
        {"", 1, "comma-separated"},         {"1x2,", 1, "an empty item"},       {"l3", 0, "no L3 cache"},
        {"1x1,1x1,1x1", 1, "more than 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct sweep_setting s[2];
        char err[200] = "";
        int n = sweep_parse_spec(bad[i].spec, bad[i].l3, s, 2, err, sizeof err);
        if (n != -1 || !strstr(err, bad[i].fragment))
            fail_msg("'%s': got %d, '%s'; expected -1 and '%s'", bad[i].spec, n, err, bad[i].fragment);
    }
}

static void test_finalize_merges_and_adds_the_baseline(void **state)
{
    (void)state;
    struct sweep_setting s[8] = {{.asked = "2x1", .instances = 2, .cores = 1},
                                 {.asked = "core", .instances = 2, .cores = 1},
                                 {.asked = "1x1", .instances = 1, .cores = 1}};
    int n = sweep_finalize(s, 3, 8, 2);
    assert_int_equal(n, 3);
    assert_string_equal(s[0].label, "1x2");
    assert_true(s[0].added_baseline);
    assert_string_equal(s[1].label, "1x1");
    assert_string_equal(s[2].label, "2x1");
    assert_string_equal(s[2].asked, "2x1,core");
    assert_int_equal(sweep_baseline(s, n, 2), 0);

    struct sweep_setting t[8] = {{.asked = "4x1", .instances = 4, .cores = 1},
                                 {.asked = "all", .instances = 1, .cores = 4}};
    n = sweep_finalize(t, 2, 8, 4);
    assert_int_equal(n, 2);
    assert_string_equal(t[0].label, "1x4");
    assert_false(t[0].added_baseline);
    assert_int_equal(sweep_finalize(t, 2, 8, 0), 2);  /* no baseline plannable: none added */
}

/* ---------------------------------------------------------------- order -- */

/* --sweep-precisions: every setting once per precision, in order, labelled;
 * bad lists refused with the flag named. */
static void test_precisions_expand(void **state)
{
    (void)state;
    struct sweep_setting s[8];
    memset(s, 0, sizeof s);
    s[0] = (struct sweep_setting){.instances = 1, .cores = 2, .label = "1x2", .asked = "all"};
    s[1] = (struct sweep_setting){.instances = 2, .cores = 1, .label = "2x1", .asked = "core"};
    char err[200] = "";
    assert_int_equal(sweep_expand_precisions(s, 2, 8, "fp32,bf16", err, sizeof err), 4);
    const char *labels[4] = {"1x2 fp32", "1x2 bf16", "2x1 fp32", "2x1 bf16"};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(s[i].label, labels[i]);
        assert_string_equal(s[i].precision, i % 2 ? "bf16" : "fp32");
        assert_string_equal(s[i].asked, i < 2 ? "all" : "core");
        assert_int_equal(s[i].instances, i < 2 ? 1 : 2);
    }
    assert_int_equal(sweep_baseline(s, 4, 2), 0);  /* the first precision's 1 x all */
    const char *bad[] = {"fp16", "", "fp32,,bf16", "fp32,bf16,fp32,bf16,fp32"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        assert_int_equal(sweep_expand_precisions(s, 2, 8, bad[i], err, sizeof err), -1);
        assert_non_null(strstr(err, "--sweep-precisions"));
    }
    assert_int_equal(sweep_expand_precisions(s, 4, 6, "fp32,bf16", err, sizeof err), -1);  /* 8 > 6 */
}

/* --sweep-global-batch: each setting's --grad-accum makes instances x
 * micro-batch x N the same global batch; a setting that cannot is named. */
static void test_global_batch_held(void **state)
{
    (void)state;
    struct sweep_setting s[3];
    memset(s, 0, sizeof s);
    s[0] = (struct sweep_setting){.instances = 1, .cores = 2, .label = "1x2"};
    s[1] = (struct sweep_setting){.instances = 2, .cores = 1, .label = "2x1"};
    s[2] = (struct sweep_setting){.instances = 4, .cores = 1, .label = "4x1 bf16"};
    char err[200] = "";
    assert_int_equal(sweep_hold_global_batch(s, 3, 48, 12, err, sizeof err), 0);
    const int accum[3] = {4, 2, 1};
    const char *labels[3] = {"1x2 acc 4", "2x1 acc 2", "4x1 bf16"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s[i].grad_accum, accum[i]);
        assert_int_equal(s[i].instances * 12 * s[i].grad_accum, 48);
        assert_string_equal(s[i].label, labels[i]);
    }
    s[0] = (struct sweep_setting){.instances = 1, .cores = 2, .label = "1x2"};
    s[1] = (struct sweep_setting){.instances = 2, .cores = 1, .label = "2x1"};
    assert_int_equal(sweep_hold_global_batch(s, 2, 36, 12, err, sizeof err), -1);
    assert_string_equal(err, "--sweep-global-batch 36: setting 2x1 runs 2 instances x --batch-size 12 = 24 samples "
                             "a micro-batch, which does not divide it");
    assert_int_equal(sweep_hold_global_batch(s, 1, 24, 0, err, sizeof err), -1);  /* no micro-batch given */
}

static void test_order_interleaves(void **state)
{
    (void)state;
    struct sweep_slot o[18];
    assert_int_equal(sweep_order(3, 2, 3, o), 18);
    int seen[3][2] = {{0}};
    for (int r = 0; r < 3; r++) {
        int round[3][2] = {{0}};
        for (int k = 0; k < 6; k++) {
            const struct sweep_slot *x = &o[r * 6 + k];
            assert_int_equal(x->repeat, r);
            round[x->setting][x->system]++;
            seen[x->setting][x->system]++;
        }
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 2; j++)
                assert_int_equal(round[i][j], 1);   /* every round runs everything once */
        assert_int_equal(o[r * 6].setting, r % 3);  /* and starts one setting later */
        assert_int_equal(o[r * 6].system, r % 2);   /* with the other system first */
        assert_int_equal(o[r * 6 + 1].setting, o[r * 6].setting);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(seen[i][0] + seen[i][1], 6);
    /* No setting always runs first or last. */
    assert_int_not_equal(o[0].setting, o[6].setting);
    assert_int_not_equal(o[5].setting, o[11].setting);
    /* Three systems (shmtrain, DDP over gloo, over shm): each first in one round. */
    assert_int_equal(sweep_order(2, 3, 3, o), 18);
    for (int r = 0; r < 3; r++) {
        int round[2][3] = {{0}};
        for (int k = 0; k < 6; k++)
            round[o[r * 6 + k].setting][o[r * 6 + k].system]++;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                assert_int_equal(round[i][j], 1);
        assert_int_equal(o[r * 6].system, r);
    }
}

/* -------------------------------------------------------------- reading -- */

static void test_read_metrics_steady_state(void **state)
{
    (void)state;
    struct sweep_run r = {0};
    struct sweep_versions v = {0};
    assert_int_equal(sweep_read_metrics(METRICS, ACCURACY(0.85), &r, &v), 0);
    /* Intervals 2 and 3 (the first is start-up): 100 steps at 25600/s and
     * 100 at 12800/s with 128 samples a step: 0.5 s + 1.0 s. */
    assert_close(r.samples_per_s, 25600 / 1.5);
    assert_close(r.step_ms, 7.5);
    assert_close(r.compute_ms, 4.5);
    assert_close(r.allreduce_ms, 0.8);
    assert_close(r.wait_ms, 0.7);
    assert_close(r.other_ms, 1.5);
    assert_close(r.time_to_target_s, 3.9);
    assert_close(r.final_accuracy, 0.86);
    assert_int_equal(r.steps, 300);
    assert_string_equal(r.precision, "bf16");
    assert_int_equal(r.ncurve, 2);
    assert_close(r.curve_s[0], 2.2);
    assert_close(r.curve_acc[1], 0.86);
    assert_string_equal(v.onednn, "2.6.3");
    assert_string_equal(v.isa, "avx512_core");
    assert_int_equal(v.threads, 1);

    assert_int_equal(sweep_read_metrics(METRICS, ACCURACY(0.9), &r, &v), 0);
    assert_true(isnan(r.time_to_target_s));

    /* With --grad-accum 2 a step is twice the samples (the records count
     * every micro-batch): the same rates are steps twice as long. */
    char accum[4096];
    const char *cut = strstr(METRICS, "\"first_step\":0}");
    assert_non_null(cut);
    snprintf(accum, sizeof accum, "%.*s\"first_step\":0,\"grad_accum\":2}%s", (int)(cut - METRICS), METRICS,
             cut + strlen("\"first_step\":0}"));
    assert_int_equal(sweep_read_metrics(accum, ACCURACY(0.85), &r, &v), 0);
    assert_close(r.samples_per_s, 25600 / 1.5);
    assert_close(r.step_ms, 15.0);

    /* A language model's target is a loss, reached from above; its curve is the loss. */
    assert_int_equal(sweep_read_metrics(METRICS, LOSS(0.5), &r, &v), 0);
    assert_close(r.time_to_target_s, 3.9);
    assert_close(r.final_loss, 0.4);
    assert_close(r.curve_acc[0], 0.6);
    assert_int_equal(sweep_read_metrics(METRICS, LOSS(0.3), &r, &v), 0);
    assert_true(isnan(r.time_to_target_s));
}

static void test_read_metrics_refuses_incomplete_runs(void **state)
{
    (void)state;
    struct sweep_run r = {0};
    /* a "DDP over shm" run whose peer says another all-reduce (or none) is not one */
    r.system = SWEEP_TORCH_SHM;
    assert_int_equal(sweep_read_metrics(METRICS, NO_TARGET, &r, NULL), -1);
    assert_non_null(strstr(r.error, "was not shm"));
    char *shm = malloc(strlen(METRICS) + 32);
    const char *at = strstr(METRICS, "\"first_step\":0}");
    assert_non_null(shm);
    assert_non_null(at);
    sprintf(shm, "%.*s\"backend\":\"shm\",%s", (int)(at - METRICS), METRICS, at);
    r = (struct sweep_run){.system = SWEEP_TORCH_SHM};
    assert_int_equal(sweep_read_metrics(shm, NO_TARGET, &r, NULL), 0);
    /* one instance has no all-reduce: its record names none, and the run stands */
    strcpy(shm, METRICS);
    memcpy(strstr(shm, "\"instances\":2"), "\"instances\":1", strlen("\"instances\":1"));
    r = (struct sweep_run){.system = SWEEP_TORCH_SHM};
    assert_int_equal(sweep_read_metrics(shm, NO_TARGET, &r, NULL), 0);
    free(shm);
    r = (struct sweep_run){0};
    char *cut = strdup(METRICS);
    *strstr(cut, "{\"type\":\"summary\"") = '\0';
    assert_int_equal(sweep_read_metrics(cut, NO_TARGET, &r, NULL), -1);
    assert_false(r.ok);
    assert_non_null(strstr(r.error, "did not finish"));
    char *no_train = strdup(METRICS);
    *strstr(no_train, "{\"type\":\"train\"") = '\0';
    assert_int_equal(sweep_read_metrics(no_train, NO_TARGET, &r, NULL), -1);
    assert_non_null(strstr(r.error, "no training interval"));
    assert_int_equal(sweep_read_metrics("", NO_TARGET, &r, NULL), -1);
    assert_non_null(strstr(r.error, "no metrics"));
    assert_int_equal(sweep_read_metrics(strstr(METRICS, "{\"type\":\"train\""), NO_TARGET, &r, NULL), -1);
    assert_non_null(strstr(r.error, "before the run record"));
    free(cut);
    free(no_train);
}

/* An independent run (--balance independent): its throughput is the sum
 * of every instance's own, not rank 0's pace times the instances; a run
 * without them, or one whose record says another balance, is no ceiling. */
static void test_read_metrics_independent(void **state)
{
    (void)state;
    char text[4096], *at;
    const char *summary = strstr(METRICS, "{\"type\":\"summary\"");
    const char *run_end = strstr(METRICS, "\"first_step\":0}");
    assert_non_null(summary);
    assert_non_null(run_end);
    const char *instances =
        "{\"type\":\"instance\",\"rank\":0,\"steps\":300,\"step_p50_s\":0.005,\"step_p90_s\":0.006,"
        "\"step_max_s\":0.01,\"compute_s\":1.5,\"exchange_s\":0,\"wait_s\":0,\"samples_per_s\":12000.0}\n"
        "{\"type\":\"instance\",\"rank\":1,\"steps\":300,\"step_p50_s\":0.008,\"step_p90_s\":0.009,"
        "\"step_max_s\":0.02,\"compute_s\":2.4,\"exchange_s\":0,\"wait_s\":0,\"samples_per_s\":7500.5}\n";
    snprintf(text, sizeof text, "%.*s\"first_step\":0,\"balance\":\"independent\"}%.*s%s%s",
             (int)(run_end - METRICS), METRICS, (int)(summary - run_end - strlen("\"first_step\":0}")),
             run_end + strlen("\"first_step\":0}"), instances, summary);
    struct sweep_run r = {.system = SWEEP_INDEPENDENT};
    assert_int_equal(sweep_read_metrics(text, NO_TARGET, &r, NULL), 0);
    assert_close(r.samples_per_s, 19500.5);
    assert_int_equal(r.instance_rates, 2);
    assert_close(r.step_ms, 7.5);  /* rank 0's steps, as every run's */
    /* the same records read as a synchronized run: refused, it exchanged nothing */
    r = (struct sweep_run){.system = SWEEP_SHMTRAIN};
    assert_int_equal(sweep_read_metrics(text, NO_TARGET, &r, NULL), -1);
    assert_non_null(strstr(r.error, "exchanged nothing"));
    /* one instance's speed missing: no sum to trust */
    *(at = strstr(text, ",\"samples_per_s\":7500.5")) = '}';
    memmove(at + 1, strchr(at + 1, '\n'), strlen(strchr(at + 1, '\n')) + 1);
    r = (struct sweep_run){.system = SWEEP_INDEPENDENT};
    assert_int_equal(sweep_read_metrics(text, NO_TARGET, &r, NULL), -1);
    assert_non_null(strstr(r.error, "every instance's own speed"));
    /* a synchronized run's records offered as the ceiling: refused */
    r = (struct sweep_run){.system = SWEEP_INDEPENDENT};
    assert_int_equal(sweep_read_metrics(METRICS, NO_TARGET, &r, NULL), -1);
    assert_non_null(strstr(r.error, "not the ceiling asked for"));
}

static void test_read_metrics_single_interval(void **state)
{
    (void)state;
    /* A budget of one log interval: that interval is all there is. */
    char *one = strdup(METRICS);
    char *second = strstr(one, "{\"type\":\"train\",\"step\":200"), *summary = strstr(one, "{\"type\":\"summary\"");
    memmove(second, summary, strlen(summary) + 1);
    struct sweep_run r = {0};
    assert_int_equal(sweep_read_metrics(one, NO_TARGET, &r, NULL), 0);
    assert_close(r.samples_per_s, 6400);
    assert_close(r.step_ms, 20);
    assert_close(r.compute_ms, 15);
    free(one);
}

static void test_reset_run_measures_nothing(void **state)
{
    (void)state;
    struct sweep_run r;
    memset(&r, 0x55, sizeof r);
    sweep_run_reset(&r, 2, SWEEP_TORCH, 1, 7);
    assert_int_equal(r.setting, 2);
    assert_int_equal(r.system, SWEEP_TORCH);
    assert_int_equal(r.order, 7);
    assert_false(r.ok);
    assert_int_equal(r.ncurve, 0);
    const double v[] = {r.samples_per_s, r.step_ms, r.compute_ms, r.allreduce_ms, r.wait_ms, r.other_ms,
                        r.time_to_target_s, r.final_accuracy, r.rss_max_mb, r.rss_total_mb, r.wall_s};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        assert_true(isnan(v[i]));
}

static void test_read_report(void **state)
{
    (void)state;
    struct sweep_run r = {.ok = true};
    assert_int_equal(sweep_read_report(REPORT, &r), 0);
    assert_close(r.rss_max_mb, 100);
    assert_close(r.rss_total_mb, 150);
    assert_close(r.wall_s, 4.5);
    char *failed = strdup(REPORT);
    memcpy(strstr(failed, "\"ok\":true"), "\"ok\":fals", 9);
    assert_int_equal(sweep_read_report(failed, &r), -1);
    assert_non_null(strstr(r.error, "instance failed"));
    assert_int_equal(sweep_read_report(NULL, &r), -1);
    free(failed);
}

/* ----------------------------------------------------------- statistics -- */

static void test_summary_and_best(void **state)
{
    (void)state;
    struct sweep_setting s[3];
    struct sweep_run runs[16];
    int n = recorded(s, runs);
    struct sweep_summary sums[3 * SWEEP_NSYSTEMS];
    sweep_summarize(runs, n, 3, sums);
    const struct sweep_summary *a = &sums[0], *c = &sums[2 * SWEEP_NSYSTEMS], *t = &sums[SWEEP_TORCH];
    assert_close(a->samples_per_s.median, 110);
    assert_close(a->samples_per_s.min, 100);
    assert_close(a->samples_per_s.max, 120);
    assert_int_equal(a->samples_per_s.n, 3);
    assert_close(a->time_to_target_s.median, 3);
    assert_int_equal(a->reached, 3);
    assert_close(a->rss_max_mb, 102);
    assert_close(c->samples_per_s.median, 175);  /* the failed repeat does not count */
    assert_int_equal(c->samples_per_s.n, 2);
    assert_int_equal(c->failed, 1);
    assert_int_equal(c->runs, 3);
    assert_close(t->samples_per_s.median, 50);
    assert_int_equal(t->runs, 2);
    assert_int_equal(sums[SWEEP_NSYSTEMS + SWEEP_TORCH].runs, 0);
    assert_close(c[SWEEP_TORCH_SHM].samples_per_s.median, 70);  /* DDP over shm: 2x1 only */
    assert_int_equal(sums[SWEEP_TORCH_SHM].runs, 0);
    assert_true(sweep_system_ran(sums, 3, SWEEP_TORCH_SHM) && sweep_system_ran(sums, 3, SWEEP_TORCH));
    assert_false(sweep_system_ran(sums, 2, SWEEP_TORCH_SHM));  /* the first two settings only */
    assert_true(a->curve_run >= 0 && runs[a->curve_run].samples_per_s == 110);

    bool by_target;
    assert_int_equal(sweep_best(sums, 3, false, &by_target), 2);  /* 175 samples/s */
    assert_false(by_target);
    /* By time to target only settings where every repeat got there count:
     * 2x1 failed once and 1x1 missed once, so 1x2 wins. */
    assert_int_equal(sweep_best(sums, 3, true, &by_target), 0);
    assert_true(by_target);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_items),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_finalize_merges_and_adds_the_baseline),
        cmocka_unit_test(test_precisions_expand),
        cmocka_unit_test(test_global_batch_held),
        cmocka_unit_test(test_order_interleaves),
        cmocka_unit_test(test_read_metrics_steady_state),
        cmocka_unit_test(test_read_metrics_refuses_incomplete_runs),
        cmocka_unit_test(test_read_metrics_single_interval),
        cmocka_unit_test(test_reset_run_measures_nothing),
        cmocka_unit_test(test_read_report),
        cmocka_unit_test(test_read_metrics_independent),
        cmocka_unit_test(test_summary_and_best),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
