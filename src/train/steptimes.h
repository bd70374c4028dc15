/* Internal: where each instance's steps went (issue 64), so a report can
 * name the slow one: this instance's step times in a histogram (no memory
 * a step), and at the run's end every instance's quantiles gathered into
 * rank 0's metrics, one "instance" record each.
 *
 * The histogram's bins grow by 2% from 10 us to ~1.7 hours; a quantile is
 * its bin's upper edge, at most 2% above the true step time. */
#ifndef SHMTRAIN_TRAIN_STEPTIMES_H
#define SHMTRAIN_TRAIN_STEPTIMES_H

#include <stdint.h>

#define STEP_TIME_BINS 1024

struct step_times {
    uint32_t bins[STEP_TIME_BINS];
    long steps;
    double max_s, compute_s, exchange_s, wait_s;
    long warm_steps;          /* the first steps (a log interval) warm caches and pages: not steady */
    long steady_steps;        /* the steps after them, and their time: the instance's own speed */
    double steady_s;
};

/* One step: its whole time and its parts (the wait is part of the exchange). */
void step_times_add(struct step_times *s, double step_s, double compute_s, double exchange_s, double wait_s);
/* The instance's own samples/s over its steady steps, `per_step` samples
 * each (all its steps when none is past the warm-up); 0 when none ran. */
double step_times_steady_rate(const struct step_times *s, double per_step);
/* The q-quantile (0 < q <= 1) of the steps so far; 0 when there are none. */
double step_times_quantile(const struct step_times *s, double q);

#endif
