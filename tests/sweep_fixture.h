/* Test helper for the sweep's tests (test_sweep.c, test_sweep_report.c):
 * three recorded settings with known throughputs and times, and the text a
 * writer produces. */
#ifndef SHMTRAIN_TESTS_SWEEP_FIXTURE_H
#define SHMTRAIN_TESTS_SWEEP_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sweep.h"

#define NO_TARGET ((struct sweep_target){0})
#define ACCURACY(v) ((struct sweep_target){.loss = false, .value = (v)})
#define LOSS(v) ((struct sweep_target){.loss = true, .value = (v)})

/* Three settings; shmtrain repeats with known throughputs and times, PyTorch
 * DDP over gloo and over shm on some of them, and 2x1's instances alone (13 runs). */
static inline int recorded(struct sweep_setting *s, struct sweep_run *runs)
{
    memset(s, 0, 3 * sizeof *s);
    const int shape[3][2] = {{1, 2}, {1, 1}, {2, 1}};
    for (int i = 0; i < 3; i++) {
        s[i].instances = shape[i][0];
        s[i].cores = shape[i][1];
        snprintf(s[i].label, sizeof s[i].label, "%dx%d", shape[i][0], shape[i][1]);
        snprintf(s[i].asked, sizeof s[i].asked, "%s", s[i].label);
    }
    const double sps[3][3] = {{100, 120, 110}, {90, 90, 90}, {200, 150, NAN}};
    const double ttt[3][3] = {{3, 2, 4}, {5, NAN, 5}, {1, 1, NAN}};
    int n = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 3; i++) {
            struct sweep_run *x = &runs[n];
            memset(x, 0, sizeof *x);
            *x = (struct sweep_run){.setting = i, .system = SWEEP_SHMTRAIN, .repeat = r, .order = n, .ok = true,
                                    .steps = 300, .samples_per_s = sps[i][r], .step_ms = 1000 * 64.0 / sps[i][r],
                                    .compute_ms = 4, .allreduce_ms = 1, .wait_ms = 0.5, .other_ms = 0.25,
                                    .time_to_target_s = ttt[i][r], .final_accuracy = 0.8 + 0.01 * r,
                                    .final_loss = 0.5 - 0.01 * r,
                                    .rss_max_mb = 100 + r, .rss_total_mb = 100.0 * s[i].instances + r, .wall_s = 10,
                                    .ncurve = 2, .curve_s = {1, 2}, .curve_acc = {0.5, 0.8}, .precision = "fp32"};
            if (s[i].instances == 2) {  /* rank 1 computes 1.25x rank 0's, which waits for it */
                x->ninst = 2;
                x->inst_compute_ms[0] = 4, x->inst_compute_ms[1] = 5;
                x->inst_wait_ms[0] = 1, x->inst_wait_ms[1] = 0;
                x->inst_p90_ms[0] = 5, x->inst_p90_ms[1] = 6;
            }
            if (isnan(sps[i][r])) {
                x->ok = false;
                snprintf(x->error, sizeof x->error, "an instance failed, exit 1");
            }
            n++;
        }
    /* PyTorch ran the baseline only, twice. */
    for (int r = 0; r < 2; r++) {
        runs[n] = (struct sweep_run){.setting = 0, .system = SWEEP_TORCH, .repeat = r, .order = n, .ok = true,
                                     .samples_per_s = 50, .step_ms = 1.28, .compute_ms = 1, .allreduce_ms = NAN,
                                     .wait_ms = NAN, .other_ms = NAN, .time_to_target_s = NAN, .final_accuracy = 0.7,
                                     .final_loss = NAN, .rss_max_mb = 300, .rss_total_mb = 300, .wall_s = 20,
                                     .ncurve = 1, .curve_s = {3}, .curve_acc = {0.7}};
        n++;
    }
    /* PyTorch over shmtrain's all-reduce ran 2x1 once. */
    runs[n] = (struct sweep_run){.setting = 2, .system = SWEEP_TORCH_SHM, .repeat = 0, .order = n, .ok = true,
                                 .samples_per_s = 70, .step_ms = 0.9, .compute_ms = 0.8, .allreduce_ms = NAN,
                                 .wait_ms = NAN, .other_ms = NAN, .time_to_target_s = NAN, .final_accuracy = 0.71,
                                 .rss_max_mb = 310, .rss_total_mb = 620, .wall_s = 15,
                                 .ncurve = 1, .curve_s = {2}, .curve_acc = {0.71}};
    n++;
    /* 2x1's instances alone (no exchange) ran once: its ceiling. */
    runs[n] = (struct sweep_run){.setting = 2, .system = SWEEP_INDEPENDENT, .repeat = 0, .order = n, .ok = true,
                                 .samples_per_s = 250, .step_ms = 0.6, .compute_ms = 0.6, .allreduce_ms = 0,
                                 .wait_ms = 0, .other_ms = 0, .time_to_target_s = NAN, .final_accuracy = NAN,
                                 .rss_max_mb = 100, .rss_total_mb = 200, .wall_s = 8, .instance_rates = 2};
    n++;
    return n;
}

static inline char *written(void (*write)(FILE *, void *), void *arg)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    write(f, arg);
    long len = ftell(f);
    assert_true(len >= 0);
    char *text = malloc((size_t)len + 1);
    assert_non_null(text);
    rewind(f);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    return text;
}

#endif
