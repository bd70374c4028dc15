/* shmtrain's command line: the training flags read into st_train_options,
 * (the parsing helpers the subcommands share: shmtrain_words.h).  A bad
 * flag ends the program with exit status 2 and one line naming it (the
 * program's contract, docs/training.md), so these functions exit rather
 * than return. */
#ifndef SHMTRAIN_OPTIONS_H
#define SHMTRAIN_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include "shmtrain/flags.h"
#include "shmtrain/train.h"
#include "shmtrain_run_dir.h"

#include "shmtrain_words.h"

#define ONE_BILLION 1000000000L

/* What main does after reading the flags. */
enum shmtrain_action { ACTION_TRAIN, ACTION_SUMMARY, ACTION_SUMMARY_KERNELS, ACTION_HELP, ACTION_VERSION };

/* Reads the training flags (after the model's recipe and --config's file,
 * which they override) into `o` (st_train_defaults first) and where the
 * outputs go into `rq` (its config_text owned by the caller); every
 * combination and the model checked.  `o` points into argv and the merged
 * words, which live until exit. */
enum shmtrain_action shmtrain_parse(int argc, char **argv, st_train_options *o, struct run_dir_request *rq);

void shmtrain_usage(FILE *f);

/* config.txt's text: every setting in effect (include/shmtrain/config_text.h's
 * syntax), so that --config of it trains the same run.  Owned by the caller. */
char *shmtrain_settings_text(const st_train_options *o, bool no_checkpoint);

#endif
