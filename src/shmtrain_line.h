/* The words shmtrain's getopt reads: the model's recipe (its `train` line),
 * then --config's file (or a resumed run folder's config.txt), then the
 * command line's, so each later one overrides the one before (a flag the
 * command line gives replaces every earlier occurrence).  A bad --model or --config line ends the
 * program with exit 2, as a bad flag does. */
#ifndef SHMTRAIN_LINE_H
#define SHMTRAIN_LINE_H

#include <getopt.h>

#include "shmtrain/train.h"

/* The merged words (argv[0] first, NULL after the last; *n of them), kept
 * until exit; o->model_recipe set.  `flags` is getopt's table. */
char **shmtrain_merge_line(int argc, char **argv, const struct option *flags, st_train_options *o, int *n);

/* The instance count a --config file (a run's config.txt) records, 0 when
 * it says none. */
int shmtrain_config_instances(void);

#endif
