/* The words every shmtrain subcommand reads (src/shmtrain_words.h). */
#define _GNU_SOURCE
#include "shmtrain_words.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "shmtrain/flags.h"

void shmtrain_bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shmtrain: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see shmtrain --help)\n");
    va_end(ap);
    exit(2);
}

/* strtol alone lets "4294967312" through, and an (int) cast would then
 * train with batch 16. */
long shmtrain_whole(const char *flag, const char *v, long min, long max)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end)
        shmtrain_bad("%s '%s': not a whole number", flag, v);
    if (errno == ERANGE || x > max || x < min)
        shmtrain_bad("%s %s: out of range [%ld, %ld]", flag, v, min, max);
    return x;
}

double shmtrain_number(const char *flag, const char *v, double min, double max)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || isnan(x))
        shmtrain_bad("%s '%s': not a number", flag, v);
    /* ERANGE with a tiny result is underflow (1e-400 is 0 to a double): in range where 0 is */
    if ((errno == ERANGE && fabs(x) > DBL_MIN) || !(x >= min && x <= max))
        shmtrain_bad("%s %s: out of range [%g, %g]", flag, v, min, max);
    return x;
}

/* The names torchrun, nanoGPT (configurator.py's keys) and Hugging Face's
 * TrainingArguments give the same knobs. */
static const st_flag_alias foreign_names[] = {
    {"learning-rate", "--lr"}, {"max-iters", "--max-steps"}, {"num-train-epochs", "--epochs"},
    {"per-device-train-batch-size", "--batch-size"}, {"train-batch-size", "--batch-size"},
    {"gradient-accumulation-steps", "--grad-accum"}, {"warmup-iters", "--warmup"}, {"warmup-steps", "--warmup"},
    {"lr-decay-iters", "--schedule cosine with --max-steps"}, {"decay-lr", "--schedule cosine"},
    {"lr-scheduler-type", "--schedule"}, {"grad-clip", "--clip-norm"}, {"max-grad-norm", "--clip-norm"},
    {"eval-interval", "--eval-every"}, {"eval-steps", "--eval-every"}, {"eval-iters", "--eval-windows"},
    {"log-interval", "--log-every"}, {"logging-steps", "--log-every"}, {"save-steps", "--checkpoint-every"},
    {"out-dir", "--out DIR"}, {"output-dir", "--out DIR"},
    {"resume-from-checkpoint", "--resume"}, {"bf16", "--precision bf16"}, {"dtype", "--precision"},
    {"optim", "--optimizer"}, {"adam-beta2", "--beta2"}, {"dataloader-num-workers", "--data-workers"},
    {"num-workers", "--data-workers"}, {"dataset", "--data, --text or --image-folder"},
    {"nproc-per-node", "shmrun -n N -- shmtrain ..."}, {"nnodes", "shmrun --hosts"},
    {"save-total-limit", "--keep K (with --checkpoint-every)"}, {"load-best-model-at-end", "--keep-best"},
    {"logging-dir", "--out DIR"}, {"logdir", "--out DIR"}, {"log-dir", "--out DIR"},
    {"overwrite-output-dir", "--overwrite"}, {"resume-from", "--resume"}, {"max-epochs", "--epochs"},
    {"standalone", "shmrun -n N -- shmtrain ... (one machine is shmrun's default)"}, {"keep-last", "--keep"},
    {"do-eval", "--max-steps 0 (evaluate only)"}, {"eval-only", "--max-steps 0 (evaluate only)"},
    {NULL, NULL}};

/* nanoGPT's sample.py and Hugging Face's generate() name these so. */
static const st_flag_alias sample_names[] = {
    {"max-new-tokens", "--tokens"}, {"start", "--prompt"}, {"out-dir", "--checkpoint RUN_FOLDER"},
    {"init-from", "--checkpoint"}, {"num-samples", "a loop over shmtrain sample --seed S"}, {NULL, NULL}};

void shmtrain_check_spelling(int argc, char **argv, const struct option *opts, const char *program)
{
    char why[512];
    const st_flag_alias *aliases = !strcmp(program, "sample: ") ? sample_names : foreign_names;
    if (st_flags_check(argc, argv, "h", opts, aliases, false, why, sizeof why))
        shmtrain_bad("%s%s", program, why);
}
