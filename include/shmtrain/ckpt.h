/* shmtrain checkpoints: everything needed to continue a run exactly.
 *
 * Plain-layout parameters (so a checkpoint does not depend on the ISA, the
 * thread count or the number of instances), batch-norm statistics, optimizer
 * state, the position in training and the model's text.  The file is a
 * header, tagged sections and a CRC-32 trailer; it is written to a temporary
 * file, fsync'ed and renamed over the old one, so a crash never leaves a
 * partial checkpoint in its place.
 */
#ifndef SHMTRAIN_CKPT_H
#define SHMTRAIN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_ckpt {
    char *model_text;
    float *params;           size_t nparams;
    float *buffers;          size_t nbuffers;
    float *optim_state;      size_t noptim;
    uint32_t optim_kind;
    uint64_t optim_steps;
    uint64_t epoch;          /* epoch in progress */
    uint64_t epoch_pos;      /* samples of that epoch's order already consumed */
    uint64_t step;           /* optimizer steps so far */
    uint64_t seed;
    uint32_t world_size;     /* of the run that wrote it (informational) */
    double best_accuracy, elapsed_s;
    uint8_t *alphabet;       /* a language model's token id -> byte; NULL (0) otherwise */
    uint32_t nalphabet;
    bool has_kept_best;      /* --keep-best: the score of the evaluation its best file holds (accuracy, */
    double kept_best;        /*   or minus the validation loss), so a resume keeps a better one */
} st_ckpt;

/* Write atomically.  The arrays are borrowed. */
st_status st_ckpt_write(const char *path, const st_ckpt *c);

/* From another thread, as the process is about to exit: remove the
 * temporary file of a write in progress and let no write create or rename
 * one from then on, so that nothing half-written is left beside the
 * previous checkpoint (which a write only replaces by its final rename). */
void st_ckpt_abandon_write(void);

/* Read and verify (magic, version, length, checksum, required sections).
 * On success *c owns its arrays: release with st_ckpt_free. */
st_status st_ckpt_read(const char *path, st_ckpt *c);
void st_ckpt_free(st_ckpt *c);

/* Does `path` start as a checkpoint does? */
bool st_ckpt_is_checkpoint(const char *path);

/* The model text a checkpoint was written for (malloc'd into *text): what
 * `--resume FILE` trains when no --model is given.  Only the header and
 * that section are read (st_ckpt_read checks the whole file). */
st_status st_ckpt_read_model_text(const char *path, char **text);

/* What a reader of a checkpoint (resume, sampling) needs it to hold.  A
 * file's sections are only copied into a model after st_ckpt_check has
 * compared their lengths with these. */
typedef struct st_ckpt_expect {
    const char *model_text;   /* the model it must be of; NULL: the one it names */
    size_t nparams, nbuffers;
    bool optim;               /* compare the optimizer's kind and state too */
    uint32_t optim_kind;
    size_t noptim;
    int vocab;                /* a language model's vocabulary: the alphabet, if any (none:
                                 trained on token files), at most this long; 0: none allowed */
} st_ckpt_expect;

/* ST_OK, or ST_ERR_MISMATCH / ST_ERR_FORMAT with one line naming `path`
 * and the section that differs. */
st_status st_ckpt_check(const st_ckpt *c, const char *path, const st_ckpt_expect *e);

#ifdef __cplusplus
}
#endif
#endif
