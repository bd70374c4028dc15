/* shmtrain's run directory: one folder per run for its checkpoint, its
 * metrics and the configuration that repeats it, so that a second run never
 * replaces the first's results (issue 43).  Used when the command line names
 * no --checkpoint or --metrics of its own, or names --out DIR. */
#ifndef SHMTRAIN_RUN_DIR_H
#define SHMTRAIN_RUN_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/train.h"

#define RUN_DIR_PATH_MAX 2048

struct run_dir_request {
    const char *out;          /* --out DIR, or NULL: runs/<model>-<job id or UTC time> */
    bool overwrite;           /* --overwrite: a DIR holding a run may be written over */
    bool checkpoint_named;    /* --checkpoint given: it goes there (and no run directory unless --out) */
    bool metrics_named;       /* --metrics given: likewise */
    bool no_checkpoint;       /* --no-checkpoint */
    const char *config_text;  /* "key value" lines that repeat the run (--config's syntax), or NULL */
};

/* Where the outputs went; o->checkpoint and o->metrics point into it. */
struct run_dir {
    bool used, rank0, events;
    char path[RUN_DIR_PATH_MAX];
    char checkpoint[RUN_DIR_PATH_MAX + 32], metrics[RUN_DIR_PATH_MAX + 32], resume[RUN_DIR_PATH_MAX + 32];
};

/* The run folder a --resume continues: `value` when it is a folder; for
 * --resume alone (value ""), --out's folder, else runs/latest's run, unless
 * --checkpoint names the file.  NULL when there is none (or no --resume). */
const char *run_dir_resumed(const char *value, const char *out, bool checkpoint_named);

/* Chooses the run directory and, on rank 0, creates it (and runs/latest,
 * and config.txt), refusing one that holds a run unless this is its resume,
 * a restart of its gang, or --overwrite.  `--resume DIR` continues DIR's
 * checkpoint there.  Returns 0, or -1 with `why` filled (a bad flag: the
 * caller exits 2). */
int run_dir_prepare(const struct run_dir_request *rq, st_train_options *o, struct run_dir *rd, char *why,
                    size_t len);

/* At the end of a run: curves.svg in the folder (loss, accuracy and
 * throughput against the step, by gnuplot from scalars.csv; curves.gp
 * redraws it).  Rank 0's, where the folder holds the scalars; a warning
 * when gnuplot is missing or fails. */
void run_dir_draw(const struct run_dir *rd);

#endif
