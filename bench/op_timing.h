/* Each operation of a training step timed where it runs: the step's op
 * lists (every layer's forward, the logits' and the loss gradient's
 * reorders, every layer's backward) in the step's order, each op's median
 * over passes of the whole sequence, and alone (back to back, its operands
 * warm).  A tied head whose loss is fused with it (gpt presets) computes
 * its logits and all three of its products inside st_net_loss, so there
 * the loss is one timed op in the head's forward place, and the head's own
 * lists (nothing left to do in them) are not timed.  For st-op-bound and
 * st-roofline, which include the engine's internal headers; any failure
 * ends the program, as a benchmark's would. */
#ifndef SHMTRAIN_BENCH_OP_TIMING_H
#define SHMTRAIN_BENCH_OP_TIMING_H

#include "net.h"
#include "onednn/onednn_internal.h"

struct timed_list {
    const struct oplist *ops;
    int node;          /* -1: the logits' reorder, -2: the loss gradient's */
    bool backward;
    bool fused_loss;   /* the head and the loss in one op (node: the head) */
    double *in_step;   /* per op: the median over passes */
    double *alone;     /* per op: the median of its runs alone */
};

/* The step's lists into out (room for 2 * nx + 2); returns how many.
 * labels: the batch's, for a fused loss (kept, not copied). */
int op_timing_collect(st_net *n, const int *labels, struct timed_list *out, const char *tool);
/* One round: every op's time in the step and alone; the sums of each. */
void op_timing_round(st_net *n, struct timed_list *l, int k, double *in_step, double *alone);
double op_timing_list_sum(const struct timed_list *l, bool alone);
void op_timing_free(struct timed_list *l, int k);
double op_timing_median(double *v, int k);

#endif
