/* Internal: a kept answer of the kernel tuner (src/nn/tune.c), read from
 * its file's text: a file from outside the program, so its reader stands
 * alone for the fuzz harness (tests/fuzz/fuzz_tunekept.c); and the race
 * that decides a switch, which the tests replace to script its verdicts. */
#ifndef SHMTRAIN_NN_TUNE_KEPT_H
#define SHMTRAIN_NN_TUNE_KEPT_H

#include <stdbool.h>

#include "shmtrain/tune.h"

/* Is `text` (NUL-terminated) the answer kept for `key` (the file's first
 * lines)?  If so, its "chose" line into out->chose and the kernel switches
 * it names on in out->tuning (a switch that is no kernel choice, or an
 * unknown word, is passed over). */
bool nn_tune_read_kept(const char *text, const char *key, st_nn_tuned *out);

/* A race: the candidate net's step over the best's (tune.c's times both in
 * alternation).  `arg` is tune.c's; NULL restores its own race. */
typedef st_status nn_tune_race_fn(const void *arg, st_net *best, st_net *candidate, double *ratio);
void nn_tune_set_race(nn_tune_race_fn *race);

#endif
