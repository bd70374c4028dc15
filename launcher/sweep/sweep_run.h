/* sweep_run: run a partitioning sweep (shmrun --sweep).
 *
 * Every run is a fresh `shmrun -n N -c C ... -- program` child (the same
 * binary), so each one plans, binds, logs, cleans up and reports exactly as a
 * user's own run would; the sweep reads back the child's report and the
 * job's metrics file, then writes runs.csv, sweep.json, report.md and the
 * plots into the output directory.  The pure parts are in sweep.h.
 */
#ifndef SHMRUN_SWEEP_RUN_H
#define SHMRUN_SWEEP_RUN_H

#include <stdbool.h>

#include "shmtrain/topo.h"
#include "sweep.h"

struct sweep_job {
    const char *spec;              /* --sweep */
    int repeats;                   /* --repeats (default 3) */
    const char *out_dir;           /* --sweep-out */
    struct sweep_target target;    /* --target-accuracy or --target-loss; value <= 0: none */
    bool compare_torch;            /* --compare-torch */
    const char *torch_script;      /* NULL: the installed or source-tree torch_ddp.py */
    const char *torch_mode;        /* --torch-mode, the peer's --mode; NULL: its default (eager) */
    const char *precisions;        /* --sweep-precisions "fp32,bf16"; NULL: the command's own */
    int global_batch;              /* --sweep-global-batch: samples a step in every setting; 0: the command's */
    bool dry_run;
    bool script;                   /* the program is not shmtrain: a user's PyTorch script, run as it is,
                                      over shm (its backend replaced: SHMTRAIN_TORCH_BACKEND) */
    bool compare_gloo;             /* --compare-backends shm,gloo: the script over gloo too */
    char **argv;                   /* the program and its arguments */
    st_plan_request req;           /* partitioning flags other than -n/-c */
    char **child_flags;            /* NULL-terminated shmrun flags every run gets */
    const char *version;           /* shmrun's */
};

/* Plan, run and report the sweep.  Returns the process exit code: 0 when
 * every run succeeded, 1 when one failed (the report says which), 2 for a
 * bad request, 130 when interrupted (the runs so far are reported). */
int sweep_main(const st_topo *t, const struct sweep_job *j);

#endif
