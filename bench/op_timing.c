/* Each operation of a training step timed where it runs (op_timing.h). */
#define _GNU_SOURCE
#include "op_timing.h"

#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>

#include "step_rig.h"

enum { PASSES = 5, ALONE = 9 };

static const char *tool_name = "op-timing";
static const int *loss_labels;  /* a C step's signature has no room for them */

static void die(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", tool_name, what, st_last_error());
    exit(1);
}

static double run_op(st_net *n, const struct op *o)
{
    const double t0 = rig_now();
    if (o->step) {
        if (o->step(n, o->node) != ST_OK)
            die("a C step");
    } else if (dnnl_primitive_execute(o->prim, dn_net(n)->strm, o->nargs, o->args) != dnnl_success ||
               dnnl_stream_wait(dn_net(n)->strm) != dnnl_success) {
        fprintf(stderr, "%s: node %d: a primitive failed\n", tool_name, o->node);
        exit(1);
    }
    return rig_now() - t0;
}

double op_timing_median(double *v, int k)
{
    rig_sort(v, k);
    return v[k / 2];
}

static st_status fused_loss(st_net *n, int node)
{
    (void)node;
    return st_net_loss(n, loss_labels, NULL, NULL);
}

/* The fused head and loss as a list of one C step, in place of the head's
 * forward list (freed with the lists). */
static struct timed_list fused_list(st_net *n)
{
    struct oplist *l = calloc(1, sizeof *l);
    struct op *o = calloc(1, sizeof *o);
    if (!l || !o)
        die("out of memory");
    *o = (struct op){.step = fused_loss, .node = n->nx - 1, .prof = NODE_HEAD};
    *l = (struct oplist){.v = o, .n = 1, .cap = 1};
    return (struct timed_list){.ops = l, .node = n->nx - 1, .fused_loss = true};
}

int op_timing_collect(st_net *n, const int *labels, struct timed_list *out, const char *tool)
{
    tool_name = tool;
    loss_labels = labels;
    const int last = n->fused_loss ? n->nx - 2 : n->nx - 1;  /* the last layer timed as itself */
    int k = 0;
    for (int j = 1; j <= last; j++)
        out[k++] = (struct timed_list){.ops = &dn_state(&n->x[j])->fwd, .node = j};
    if (n->fused_loss)
        out[k++] = fused_list(n);
    out[k++] = (struct timed_list){.ops = &dn_net(n)->to_logits, .node = -1};
    out[k++] = (struct timed_list){.ops = &dn_net(n)->from_dlast, .node = -2, .backward = true};
    for (int j = last; j >= 1; j--)
        out[k++] = (struct timed_list){.ops = &dn_state(&n->x[j])->bwd, .node = j, .backward = true};
    for (int i = 0; i < k; i++) {
        out[i].in_step = calloc((size_t)out[i].ops->n + 1, sizeof(double));
        out[i].alone = calloc((size_t)out[i].ops->n + 1, sizeof(double));
        if (!out[i].in_step || !out[i].alone)
            die("out of memory");
    }
    return k;
}

void op_timing_round(st_net *n, struct timed_list *l, int k, double *in_step, double *alone)
{
    *in_step = *alone = 0;
    size_t total = 0;
    for (int i = 0; i < k; i++)
        total += (size_t)l[i].ops->n;
    double *passes = malloc((total + 1) * PASSES * sizeof(double));
    if (!passes)
        die("out of memory");
    for (int p = 0; p < PASSES; p++) {
        size_t at = 0;
        for (int i = 0; i < k; i++)
            for (int o = 0; o < l[i].ops->n; o++)
                passes[(at++) * PASSES + p] = run_op(n, &l[i].ops->v[o]);
    }
    size_t at = 0;
    for (int i = 0; i < k; i++)
        for (int o = 0; o < l[i].ops->n; o++, at++) {
            double runs[ALONE];
            l[i].in_step[o] = op_timing_median(passes + at * PASSES, PASSES);
            for (int r = 0; r < ALONE; r++)
                runs[r] = run_op(n, &l[i].ops->v[o]);
            l[i].alone[o] = op_timing_median(runs, ALONE);
            *in_step += l[i].in_step[o];
            *alone += l[i].alone[o];
        }
    free(passes);
}

double op_timing_list_sum(const struct timed_list *l, bool alone)
{
    double s = 0;
    for (int o = 0; o < l->ops->n; o++)
        s += alone ? l->alone[o] : l->in_step[o];
    return s;
}

void op_timing_free(struct timed_list *l, int k)
{
    for (int i = 0; i < k; i++) {
        free(l[i].in_step), free(l[i].alone);
        if (l[i].fused_loss)
            free(l[i].ops->v), free((void *)l[i].ops);
    }
}
