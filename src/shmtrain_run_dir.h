/* shmtrain's run directory: one folder per run for its checkpoint, its
 * metrics and the configuration that repeats it, so that a second run never
 * replaces the first's results (issues 43, 62).
 *
 * Every output a run writes goes to its folder unless named: --checkpoint
 * FILE puts the checkpoint there (and --keep-best's FILE-best.ckpt beside
 * it), --metrics FILE the records; both named, no folder is made.  A file
 * or folder that holds a result is never written over unless the user says
 * so (--overwrite), resumes it (--resume), or the launcher restarts the
 * gang.  Nothing is written until training starts (run_dir_begin), so a
 * start that fails leaves nothing behind to refuse the next try.
 *
 * The folder's files (RUN_FILES): shmtrain.ckpt, best.ckpt,
 * shmtrain-stepN.ckpt (--keep), metrics.jsonl, events.out.tfevents.*,
 * scalars.csv, console.log, config.txt, curves.svg, curves.gp, kernels.txt.  runs/latest
 * is a link to the newest run's checkpoint (a file, so that TensorBoard's
 * `--logdir runs` does not list the newest run twice): `--resume` alone,
 * `sample --checkpoint runs/latest` and `export --checkpoint runs/latest`
 * take it. */
#ifndef SHMTRAIN_RUN_DIR_H
#define SHMTRAIN_RUN_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/train.h"

#define RUN_DIR_PATH_MAX 4096
#define RUN_DIR_NAME_MAX (RUN_DIR_PATH_MAX - 64)  /* room for the longest file name inside */

struct run_dir_request {
    const char *out;          /* --out DIR, or NULL: runs/<model>-<job id or UTC time> */
    bool overwrite;           /* --overwrite: outputs holding a run may be written over */
    bool checkpoint_named;    /* --checkpoint given: it goes there */
    bool metrics_named;       /* --metrics given: likewise */
    bool no_checkpoint;       /* --no-checkpoint */
    const char *config_text;  /* config.txt's settings (shmtrain_settings_text), or NULL */
};

struct run_dir {
    bool used, rank0, created, resuming, began, named_by_time;
    char path[RUN_DIR_PATH_MAX];
    char checkpoint[RUN_DIR_PATH_MAX + 64], metrics[RUN_DIR_PATH_MAX + 64], resume[RUN_DIR_PATH_MAX + 64],
        best[RUN_DIR_PATH_MAX + 64];
    const char *config_text;  /* borrowed from the request */
    const char *checkpoint_used;  /* the folder's checkpoint, where the run writes it; NULL otherwise */
    int instances;
};

/* The run folder a --resume continues: `value` when it is a run's folder
 * or a run folder's checkpoint; for --resume alone (value ""), --out's
 * folder, else runs/latest's run, unless --checkpoint names the file.  NULL
 * when there is none (or no --resume). */
const char *run_dir_resumed(const char *value, const char *out, bool checkpoint_named);

/* Chooses the run's outputs and checks them on every instance (each gives
 * the same answer: nothing is written yet); rank 0 makes the folder.  A
 * folder or named file holding a result is refused unless this is its
 * resume, a restart of its gang, or --overwrite.  Returns 0, or -1 with
 * `why` filled (a bad flag: the caller exits 2). */
int run_dir_prepare(const struct run_dir_request *rq, st_train_options *o, struct run_dir *rd, char *why,
                    size_t len);

/* Training starts (rank 0; the trainer's on_start): --overwrite's old files
 * go, config.txt is written (a resume or restart keeps the one there),
 * runs/latest points here, shmrun's log folder gets its metrics link, and
 * console.log starts keeping what this process prints. */
void run_dir_begin(void *run_dir);

/* The run ended, however: curves.svg drawn from scalars.csv where the run
 * logged any, console.log closed; a start that never began leaves no folder
 * it made. */
void run_dir_end(struct run_dir *rd);

#endif
