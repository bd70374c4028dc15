/* shmtrain's training flags (src/shmtrain_options.h): the help, the table,
 * one reader per topic (the help's groups), the checks across flags. */
#define _GNU_SOURCE
#include "shmtrain_options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmtrain/config_text.h"
#include "shmtrain/nn.h"
#include "shmtrain/paths.h"
#include "shmtrain/text.h"
#include "shmtrain_line.h"
#include "shmtrain_run_dir.h"

void shmtrain_usage(FILE *f)
{
    fprintf(f,
"usage: shmtrain [options]                     train (under shmrun for several instances)\n"
"       shmtrain sample --checkpoint FILE --prompt TEXT [options]   continue a text (sample --help)\n"
"       shmtrain export --checkpoint FILE --out MODEL.safetensors   for PyTorch (export --help)\n"
"       shmtrain --version | --help\n"
"model:\n"
"  --model NAME|FILE        mlp, lenet, cnn, resnet, gpt-mini, gpt, gpt2 or a model file (default lenet)\n"
"  --summary                print the model's layers, output shapes and parameters, and exit\n"
"  --init-from MODEL.safetensors    start from these weights (shmtrain export's, by PyTorch's names)\n"
"data:\n"
"  --data DIR               IDX directory (default /usr/share/datasets/fashion-mnist)\n"
"  --train-images F --train-labels F --test-images F --test-labels F   IDX files\n"
"  --cifar DIR              CIFAR-10 binary batches instead; --cifar100 DIR for CIFAR-100\n"
"  --npy-images F --npy-labels F [--npy-test-images F --npy-test-labels F]   NumPy arrays (np.save):\n"
"                           images uint8 or float32 in [0,1], NHWC or NCHW; labels integers\n"
"  --image-folder ROOT      images (PNG, JPEG) in torchvision's ImageFolder layout: ROOT/train/CLASS/*\n"
"                           and ROOT/val/CLASS/*, or ROOT/CLASS/* (then --val-fraction is held out)\n"
"  --image-size S           resize the shorter side to S, then crop the model's input from the centre\n"
"  --data-memory GB         a folder decoding to more is streamed batch by batch (a quarter of RAM)\n"
"  --data-workers N         streaming: decoding threads per instance, a batch ahead (2)\n"
"  --val-fraction F         held out for testing when the data has no test split (0.1)\n"
"  --train-subset N --test-subset N   use only the first N samples\n"
"  --augment                random crop (padding 4) and horizontal flip\n"
"  --text PATH              a language model's text: a file or a directory of files; its last 10%%\n"
"                           validates, or give --text twice (training, validation)\n"
"  --tokens chars|bytes     token ids: the text's characters (default) or all 256 bytes\n"
"  --tokens-bin F [--val-bin F] [--vocab N]   token ids from another tokenizer: nanoGPT's .bin\n"
"                           (uint16) or llm.c's; without --val-bin the last 10%% validates; ids < N\n"
"optimisation:\n"
"  --epochs N (1; with --max-steps alone, as many as it takes)   --max-steps N (the step budget;\n"
"                   with --epochs too, whichever ends first; 0: evaluate only)\n"
"  --batch-size B (64, per instance)\n"
"  --grad-accum N (1)       micro-batches of B per optimizer step, their gradients averaged and\n"
"                           exchanged once (nanoGPT's gradient_accumulation_steps)\n"
"  --balance static|dynamic|independent (static)   dynamic: a node's instances take the step's\n"
"                           instances x N micro-batches from a shared counter, so none waits for a\n"
"                           slow one; independent: no exchange, each trains its own model on its\n"
"                           shard (the speed the machine allows without synchronising)\n"
"  --optimizer sgd|adamw (sgd)   --lr LR (0.05)   --momentum M (0.9)   --nesterov\n"
"  --weight-decay W (0; language models: matrices only)   --beta2 B (AdamW, 0.999)\n"
"  --clip-norm C (off)   --scale-lr (lr x instances)\n"
"  --schedule constant|step|cosine   --warmup STEPS   --step-size STEPS --gamma G   --min-lr LR\n"
"  --seed S (1)   --target-accuracy A (stop once the test accuracy reaches A)\n"
"  --target-loss L          stop once the validation loss is at most L (language models)\n"
"evaluation and outputs:\n"
"  --eval-every K (0 = each epoch)   --eval-windows N (language models: 256; 0 = all)\n"
"  --log-every K (50)   --quiet\n"
"  --out DIR                the run's folder: shmtrain.ckpt, metrics.jsonl, TensorBoard's events,\n"
"                           scalars.csv, console.log, config.txt (default runs/MODEL-JOB or\n"
"                           runs/MODEL-UTC TIME; runs/latest: the newest's checkpoint)\n"
"  --resume [DIR|FILE]      go on from a run's folder (alone: runs/latest) or a checkpoint file\n"
"  --checkpoint FILE --metrics FILE   these outputs here, not in the run folder   --no-checkpoint\n"
"  --overwrite              write over the run in --out DIR, --checkpoint or --metrics (an output\n"
"                           holding a result is refused unless resumed or overwritten)\n"
"  --checkpoint-every K     also every K steps (a failed one is a warning)\n"
"  --keep K                 keep the last K of those as FILE-stepN.ckpt   --keep-best  best.ckpt:\n"
"                           the best evaluation's (validation loss, or test accuracy)\n"
"  --config FILE            settings as 'key value' lines (a run's config.txt repeats it); flags\n"
"                           given on the command line replace the file's\n"
"several instances:\n"
"  --allreduce-dtype fp32|bf16|fp16   the gradient exchange (bf16, fp16: half the bytes, summed in fp32)\n"
"  --bucket-mb MB           all-reduce gradients in buckets of MB during backward (0: after it)\n"
"  --check-replicas K       check every K steps that all instances hold identical parameters\n"
"precision:\n"
"  --precision fp32|bf16    compute: bf16 runs convolutions and linear layers in bf16 (native bf16\n"
"                           CPUs: AVX512-BF16 or AMX), parameters and optimizer stay fp32\n"
"  --no-flush-denormals     keep denormal floats (slower late in training)\n"
"exit status: 0 done, 1 failed, 2 bad flag, 75 stopped because another instance failed,\n"
"  130 stopped on request (checkpointed)\n");
}

enum {
    O_MODEL = 256, O_DATA, O_TRI, O_TRL, O_TEI, O_TEL, O_CIFAR, O_CIFAR100, O_TRS, O_TES, O_AUG, O_EPOCHS,
    O_MAXSTEPS, O_BATCH, O_OPT, O_LR, O_MOM, O_NEST, O_WD, O_CLIP, O_SCALE, O_SCHED, O_WARM, O_STEPSZ, O_GAMMA,
    O_MINLR, O_SEED, O_TARGET, O_NOFLUSH, O_EVAL, O_LOG, O_METRICS, O_QUIET, O_CKPT, O_CKPTE, O_RESUME, O_CHECK,
    O_ARDTYPE, O_PRECISION, O_BUCKET, O_ACCUM, O_TEXT, O_TOKENS, O_EVALWIN, O_BETA2, O_TLOSS, O_SUMMARY, O_INIT,
    O_TOKBIN, O_VALBIN, O_VOCAB, O_NPYI, O_NPYL, O_NPYTI, O_NPYTL, O_VALFRAC, O_IMGDIR, O_IMGSIZE, O_DATAMEM,
    O_DATAWORK, O_VERSION, O_OUT, O_OVERWRITE, O_CONFIG, O_NOCKPT, O_KEEP, O_KEEPBEST, O_BALANCE
};

static const struct option training_flags[] = {
    {"model", 1, 0, O_MODEL}, {"summary", 0, 0, O_SUMMARY}, {"init-from", 1, 0, O_INIT},
    {"data", 1, 0, O_DATA}, {"train-images", 1, 0, O_TRI}, {"train-labels", 1, 0, O_TRL},
    {"test-images", 1, 0, O_TEI}, {"test-labels", 1, 0, O_TEL}, {"cifar", 1, 0, O_CIFAR},
    {"cifar100", 1, 0, O_CIFAR100}, {"npy-images", 1, 0, O_NPYI}, {"npy-labels", 1, 0, O_NPYL},
    {"npy-test-images", 1, 0, O_NPYTI}, {"npy-test-labels", 1, 0, O_NPYTL}, {"image-folder", 1, 0, O_IMGDIR},
    {"image-size", 1, 0, O_IMGSIZE}, {"data-memory", 1, 0, O_DATAMEM}, {"data-workers", 1, 0, O_DATAWORK},
    {"val-fraction", 1, 0, O_VALFRAC}, {"train-subset", 1, 0, O_TRS}, {"test-subset", 1, 0, O_TES},
    {"augment", 0, 0, O_AUG}, {"text", 1, 0, O_TEXT}, {"tokens", 1, 0, O_TOKENS}, {"tokens-bin", 1, 0, O_TOKBIN},
    {"val-bin", 1, 0, O_VALBIN}, {"vocab", 1, 0, O_VOCAB}, {"epochs", 1, 0, O_EPOCHS},
    {"max-steps", 1, 0, O_MAXSTEPS}, {"batch-size", 1, 0, O_BATCH}, {"grad-accum", 1, 0, O_ACCUM},
    {"balance", 1, 0, O_BALANCE},
    {"optimizer", 1, 0, O_OPT}, {"lr", 1, 0, O_LR}, {"momentum", 1, 0, O_MOM}, {"nesterov", 0, 0, O_NEST},
    {"weight-decay", 1, 0, O_WD}, {"beta2", 1, 0, O_BETA2}, {"clip-norm", 1, 0, O_CLIP},
    {"scale-lr", 0, 0, O_SCALE}, {"schedule", 1, 0, O_SCHED}, {"warmup", 1, 0, O_WARM},
    {"step-size", 1, 0, O_STEPSZ}, {"gamma", 1, 0, O_GAMMA}, {"min-lr", 1, 0, O_MINLR}, {"seed", 1, 0, O_SEED},
    {"target-accuracy", 1, 0, O_TARGET}, {"target-loss", 1, 0, O_TLOSS}, {"eval-every", 1, 0, O_EVAL},
    {"eval-windows", 1, 0, O_EVALWIN}, {"log-every", 1, 0, O_LOG}, {"metrics", 1, 0, O_METRICS},
    {"quiet", 0, 0, O_QUIET}, {"checkpoint", 1, 0, O_CKPT}, {"checkpoint-every", 1, 0, O_CKPTE},
    {"resume", 2, 0, O_RESUME}, {"out", 1, 0, O_OUT}, {"overwrite", 0, 0, O_OVERWRITE}, {"config", 1, 0, O_CONFIG},
    {"no-checkpoint", 0, 0, O_NOCKPT}, {"keep", 1, 0, O_KEEP}, {"keep-best", 0, 0, O_KEEPBEST}, {"allreduce-dtype", 1, 0, O_ARDTYPE}, {"bucket-mb", 1, 0, O_BUCKET},
    {"check-replicas", 1, 0, O_CHECK}, {"precision", 1, 0, O_PRECISION},
    {"no-flush-denormals", 0, 0, O_NOFLUSH}, {"version", 0, 0, O_VERSION}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};

/* ---------------------------------------------------- the settings in effect --
 * config.txt repeats a run: every setting that shapes it, with the value it
 * had (a default as much as a flag), so that a later change of a default
 * does not change what the file repeats.  Read back by --config, each
 * gives the same field (floats printed to their last bit).  Outputs (--out,
 * --checkpoint, --metrics, --resume, --config, --quiet) are not settings. */
enum setting_kind { K_STR, K_INT, K_LONG, K_U64, K_FLOAT, K_DOUBLE, K_BOOL, K_OFF_BOOL, K_DTYPE, K_CHOICE };

struct setting {
    const char *flag;
    enum setting_kind kind;
    size_t offset;
    bool skip_zero;                /* zero means "not given" (or the flag takes no zero) */
    const char *const *choices;    /* K_CHOICE: the flag's words by the field's value */
};

static const char *const optimizers[] = {"sgd", "adamw", NULL}, *const schedules[] = {"constant", "step", "cosine", NULL},
                         *const token_kinds[] = {"chars", "bytes", NULL},
                         *const balances[] = {"static", "dynamic", "independent", NULL};

#define AT(field) offsetof(st_train_options, field)
static const struct setting settings[] = {
    {"model", K_STR, AT(model), 1, 0}, {"init-from", K_STR, AT(init_from), 1, 0}, {"data", K_STR, AT(data_dir), 1, 0},
    {"train-images", K_STR, AT(train_images), 1, 0}, {"train-labels", K_STR, AT(train_labels), 1, 0},
    {"test-images", K_STR, AT(test_images), 1, 0}, {"test-labels", K_STR, AT(test_labels), 1, 0},
    {"npy-images", K_STR, AT(npy_images), 1, 0}, {"npy-labels", K_STR, AT(npy_labels), 1, 0},
    {"npy-test-images", K_STR, AT(npy_test_images), 1, 0}, {"npy-test-labels", K_STR, AT(npy_test_labels), 1, 0},
    {"image-folder", K_STR, AT(image_folder), 1, 0}, {"image-size", K_INT, AT(image_size), 1, 0},
    {"data-memory", K_DOUBLE, AT(data_memory_gb), 1, 0}, {"data-workers", K_INT, AT(data_workers), 0, 0},
    {"val-fraction", K_FLOAT, AT(val_fraction), 0, 0}, {"train-subset", K_LONG, AT(train_subset), 1, 0},
    {"test-subset", K_LONG, AT(test_subset), 1, 0}, {"augment", K_BOOL, AT(augment), 0, 0},
    {"tokens", K_CHOICE, AT(text_tokens), 0, token_kinds}, {"tokens-bin", K_STR, AT(tokens_bin), 1, 0},
    {"val-bin", K_STR, AT(val_bin), 1, 0}, {"vocab", K_LONG, AT(vocab), 1, 0},
    {"epochs", K_INT, AT(epochs), 1, 0}, {"max-steps", K_LONG, AT(max_steps), 1, 0},
    {"batch-size", K_INT, AT(batch), 0, 0}, {"grad-accum", K_INT, AT(grad_accum), 1, 0},
    {"balance", K_CHOICE, AT(balance), 0, balances},
    {"optimizer", K_CHOICE, AT(optim.kind), 0, optimizers}, {"lr", K_FLOAT, AT(schedule.lr), 0, 0},
    {"momentum", K_FLOAT, AT(optim.momentum), 0, 0}, {"nesterov", K_BOOL, AT(optim.nesterov), 0, 0},
    {"weight-decay", K_FLOAT, AT(optim.weight_decay), 0, 0}, {"beta2", K_FLOAT, AT(optim.beta2), 1, 0},
    {"clip-norm", K_FLOAT, AT(clip_norm), 1, 0}, {"scale-lr", K_BOOL, AT(scale_lr), 0, 0},
    {"schedule", K_CHOICE, AT(schedule.kind), 0, schedules}, {"warmup", K_U64, AT(schedule.warmup), 0, 0},
    {"step-size", K_U64, AT(schedule.step_size), 1, 0}, {"gamma", K_FLOAT, AT(schedule.gamma), 1, 0},
    {"min-lr", K_FLOAT, AT(schedule.min_lr), 0, 0}, {"seed", K_U64, AT(seed), 0, 0},
    {"target-accuracy", K_FLOAT, AT(target_accuracy), 1, 0}, {"target-loss", K_FLOAT, AT(target_loss), 1, 0},
    {"eval-every", K_LONG, AT(eval_every), 0, 0}, {"eval-windows", K_LONG, AT(eval_windows), 0, 0},
    {"log-every", K_LONG, AT(log_every), 0, 0}, {"checkpoint-every", K_LONG, AT(checkpoint_every), 1, 0},
    {"keep", K_INT, AT(keep_last), 1, 0}, {"keep-best", K_BOOL, AT(keep_best), 0, 0},
    {"allreduce-dtype", K_DTYPE, AT(allreduce_dtype), 0, 0}, {"bucket-mb", K_DOUBLE, AT(bucket_mb), 1, 0},
    {"check-replicas", K_LONG, AT(check_replicas), 1, 0}, {"precision", K_DTYPE, AT(precision), 0, 0},
    {"no-flush-denormals", K_OFF_BOOL, AT(flush_denormals), 0, 0},
};
#undef AT

/* One setting's value as text into buf; false when it is not to be written. */
static bool setting_value(const struct setting *s, const st_train_options *o, char *buf, size_t len)
{
    const char *field = (const char *)o + s->offset;
    double number = 0;
    switch (s->kind) {
    case K_STR: {
        const char *v = *(const char *const *)field;
        snprintf(buf, len, "%s", v ? v : "");
        return v != NULL;
    }
    case K_BOOL: buf[0] = '\0'; return *(const bool *)field;
    case K_OFF_BOOL: buf[0] = '\0'; return !*(const bool *)field;
    case K_CHOICE: snprintf(buf, len, "%s", s->choices[*(const int *)field]); return true;
    case K_DTYPE: snprintf(buf, len, "%s", st_dtype_name(*(const st_dtype *)field)); return true;
    case K_INT: number = *(const int *)field; snprintf(buf, len, "%d", *(const int *)field); break;
    case K_LONG: number = (double)*(const long *)field; snprintf(buf, len, "%ld", *(const long *)field); break;
    case K_U64:
        number = (double)*(const uint64_t *)field;
        snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field);
        break;
    case K_FLOAT: /* the shortest text that reads back as the same float: 0.05, not 0.0500000007 */
        number = *(const float *)field;
        for (int digits = 6; digits <= 9; digits++)
            if (snprintf(buf, len, "%.*g", digits, number) > 0 && strtof(buf, NULL) == (float)number)
                break;
        break;
    case K_DOUBLE:
        number = *(const double *)field;
        for (int digits = 15; digits <= 17; digits++)
            if (snprintf(buf, len, "%.*g", digits, number) > 0 && strtod(buf, NULL) == number)
                break;
        break;
    }
    return !(s->skip_zero && number == 0);
}

char *shmtrain_settings_text(const st_train_options *o, bool no_checkpoint)
{
    char *text = NULL, value[4200];
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        shmtrain_bad("out of memory");
    fprintf(f, "# the settings in effect; `shmtrain --config THIS` repeats the run (shmrun -n as `instances` says)\n");
    for (size_t i = 0; i < sizeof settings / sizeof *settings; i++) {
        if (!setting_value(&settings[i], o, value, sizeof value))
            continue;
        if (!strcmp(settings[i].flag, "data") && (o->cifar_dir || o->image_folder || o->npy_images || o->ntext ||
                                                  o->tokens_bin || o->train_images))
            continue;  /* another source replaces the default IDX folder */
        char *quoted = value[0] || settings[i].kind == K_STR ? st_config_quote(value) : NULL;
        fprintf(f, quoted ? "%s %s\n" : "%s\n", settings[i].flag, quoted);
        free(quoted);
    }
    if (o->cifar_dir) {
        char *quoted = st_config_quote(o->cifar_dir);
        fprintf(f, "%s %s\n", o->cifar100 ? "cifar100" : "cifar", quoted ? quoted : "");
        free(quoted);
    }
    for (int i = 0; i < o->ntext; i++) {
        char *quoted = st_config_quote(o->text[i]);
        fprintf(f, "text %s\n", quoted ? quoted : "");
        free(quoted);
    }
    if (no_checkpoint)
        fprintf(f, "no-checkpoint\n");
    if (o->evaluate_only)
        fprintf(f, "max-steps 0\n");
    if (fclose(f) != 0)
        shmtrain_bad("out of memory");
    return text;
}

static st_dtype dtype_flag(const char *flag, const char *v)
{
    st_dtype t;
    if (!st_dtype_parse(v, &t))
        shmtrain_bad("%s '%s': use fp32, bf16 or fp16", flag, v);
    return t;
}

/* One reader per group of the help; each says whether the flag was its. */
static bool model_or_data_flag(int c, char *v, st_train_options *o)
{
    switch (c) {
    case O_MODEL: o->model = v; break;
    case O_INIT: o->init_from = v; break;
    case O_DATA: o->data_dir = v; break;
    case O_TRI: o->train_images = v; break;
    case O_TRL: o->train_labels = v; break;
    case O_TEI: o->test_images = v; break;
    case O_TEL: o->test_labels = v; break;
    case O_CIFAR: o->cifar_dir = v; break;
    case O_CIFAR100: o->cifar_dir = v; o->cifar100 = true; break;
    case O_NPYI: o->npy_images = v; break;
    case O_NPYL: o->npy_labels = v; break;
    case O_NPYTI: o->npy_test_images = v; break;
    case O_NPYTL: o->npy_test_labels = v; break;
    case O_IMGDIR: o->image_folder = v; break;
    case O_IMGSIZE: o->image_size = (int)shmtrain_whole("--image-size", v, 1, 16384); break;
    case O_DATAMEM: o->data_memory_gb = shmtrain_number("--data-memory", v, 1e-9, 1e6); break;
    case O_DATAWORK: o->data_workers = (int)shmtrain_whole("--data-workers", v, 0, 256); break;
    case O_VALFRAC: o->val_fraction = shmtrain_number("--val-fraction", v, 0, 0.9f); break;
    case O_TRS: o->train_subset = shmtrain_whole("--train-subset", v, 1, ONE_BILLION); break;
    case O_TES: o->test_subset = shmtrain_whole("--test-subset", v, 1, ONE_BILLION); break;
    case O_AUG: o->augment = true; break;
    case O_TEXT:
        if (o->ntext == 2)
            shmtrain_bad("--text: at most two (training, then validation)");
        o->text[o->ntext++] = v;
        break;
    case O_TOKENS:
        if (!strcmp(v, "chars")) o->text_tokens = ST_TEXT_CHARS;
        else if (!strcmp(v, "bytes")) o->text_tokens = ST_TEXT_BYTES;
        else shmtrain_bad("--tokens '%s': use chars or bytes", v);
        break;
    case O_TOKBIN: o->tokens_bin = v; break;
    case O_VALBIN: o->val_bin = v; break;
    case O_VOCAB: o->vocab = shmtrain_whole("--vocab", v, 1, 65536); break;
    default: return false;
    }
    return true;
}

static bool optimisation_flag(int c, char *v, st_train_options *o, bool *momentum_set)
{
    switch (c) {
    case O_EPOCHS: o->epochs = (int)shmtrain_whole("--epochs", v, 1, 1000000); break;
    case O_MAXSTEPS:
        o->max_steps = shmtrain_whole("--max-steps", v, 0, LONG_MAX);
        o->evaluate_only = o->max_steps == 0;  /* nothing trained: an evaluation of what it starts from */
        break;
    case O_BATCH: o->batch = (int)shmtrain_whole("--batch-size", v, 1, 1 << 20); break;
    case O_ACCUM: o->grad_accum = (int)shmtrain_whole("--grad-accum", v, 1, 4096); break;
    case O_BALANCE:  /* st_balance's values in the order of their words */
        for (o->balance = 0; balances[o->balance] && strcmp(v, balances[o->balance]);)
            o->balance++;
        if (!balances[o->balance])
            shmtrain_bad("--balance '%s': use static, dynamic or independent", v);
        break;
    case O_OPT:
        if (!strcmp(v, "sgd")) o->optim.kind = ST_OPTIM_SGD;
        else if (!strcmp(v, "adamw")) o->optim.kind = ST_OPTIM_ADAMW;
        else shmtrain_bad("--optimizer '%s': use sgd or adamw", v);
        break;
    case O_LR: o->schedule.lr = shmtrain_number("--lr", v, 0, 100); break;
    case O_MOM: o->optim.momentum = shmtrain_number("--momentum", v, 0, 0.999f); *momentum_set = true; break;
    case O_NEST: o->optim.nesterov = true; break;
    case O_WD: o->optim.weight_decay = shmtrain_number("--weight-decay", v, 0, 1); break;
    case O_BETA2: o->optim.beta2 = shmtrain_number("--beta2", v, 0, 0.99999f); break;
    case O_CLIP: o->clip_norm = shmtrain_number("--clip-norm", v, 0, 1e6); break;
    case O_SCALE: o->scale_lr = true; break;
    case O_SCHED:
        if (!strcmp(v, "constant")) o->schedule.kind = ST_SCHED_CONSTANT;
        else if (!strcmp(v, "step")) o->schedule.kind = ST_SCHED_STEP;
        else if (!strcmp(v, "cosine")) o->schedule.kind = ST_SCHED_COSINE;
        else shmtrain_bad("--schedule '%s': use constant, step or cosine", v);
        break;
    case O_WARM: o->schedule.warmup = (uint64_t)shmtrain_whole("--warmup", v, 0, LONG_MAX); break;
    case O_STEPSZ: o->schedule.step_size = (uint64_t)shmtrain_whole("--step-size", v, 1, LONG_MAX); break;
    case O_GAMMA: o->schedule.gamma = shmtrain_number("--gamma", v, 0, 1); break;
    case O_MINLR: o->schedule.min_lr = shmtrain_number("--min-lr", v, 0, 100); break;
    case O_SEED: o->seed = (uint64_t)shmtrain_whole("--seed", v, 0, LONG_MAX); break;
    case O_TARGET: o->target_accuracy = shmtrain_number("--target-accuracy", v, 0, 1); break;
    case O_TLOSS: o->target_loss = shmtrain_number("--target-loss", v, 0, 1e6); break;
    default: return false;
    }
    return true;
}

static bool output_or_run_flag(int c, char *v, st_train_options *o)
{
    switch (c) {
    case O_EVAL: o->eval_every = shmtrain_whole("--eval-every", v, 0, LONG_MAX); break;
    case O_EVALWIN: o->eval_windows = shmtrain_whole("--eval-windows", v, 0, ONE_BILLION); break;
    case O_LOG: o->log_every = shmtrain_whole("--log-every", v, 1, LONG_MAX); break;
    case O_METRICS: o->metrics = v; break;
    case O_QUIET: o->quiet = true; break;
    case O_CKPT: o->checkpoint = v; break;
    case O_CKPTE: o->checkpoint_every = shmtrain_whole("--checkpoint-every", v, 0, LONG_MAX); break;
    case O_KEEP: o->keep_last = (int)shmtrain_whole("--keep", v, 1, 1000000); break;
    case O_KEEPBEST: o->keep_best = true; break;
    case O_RESUME: o->resume = v ? v : ""; break;  /* "": run_dir_prepare says which */
    case O_ARDTYPE: o->allreduce_dtype = dtype_flag("--allreduce-dtype", v); break;
    case O_BUCKET: o->bucket_mb = shmtrain_number("--bucket-mb", v, 0, 1024); break;
    case O_CHECK: o->check_replicas = shmtrain_whole("--check-replicas", v, 1, LONG_MAX); break;
    case O_PRECISION:
        o->precision = dtype_flag("--precision", v);
        if (st_nn_precision_check(o->precision, ST_BACKEND_ONEDNN, &o->tuning) != ST_OK)
            shmtrain_bad("--%s", st_last_error());
        break;
    case O_NOFLUSH: o->flush_denormals = false; break;
    default: return false;
    }
    return true;
}

/* An output the run could not write is found now, not after training: the
 * folder exists and takes new files, and the name is not a folder. */
static void check_output_path(const char *flag, const char *path)
{
    if (!path)
        return;
    char folder[4096];
    if (strlen(path) >= sizeof folder)
        shmtrain_bad("%s: the name is too long", flag);
    st_path_folder(path, folder, sizeof folder);
    struct stat sb;
    if (stat(folder, &sb) != 0)
        shmtrain_bad("%s %s: the folder %s does not exist", flag, path, folder);
    if (!S_ISDIR(sb.st_mode))
        shmtrain_bad("%s %s: %s is a file, not a folder", flag, path, folder);
    if (access(folder, W_OK | X_OK) != 0)
        shmtrain_bad("%s %s: cannot create files in %s: %s", flag, path, folder, strerror(errno));
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        shmtrain_bad("%s %s: a folder; give a file name", flag, path);
}

/* Flags that only mean something together, checked before any work. */
static void check_combinations(st_train_options *o, const struct run_dir_request *rq, bool momentum_set)
{
    if (rq->no_checkpoint && (rq->checkpoint_named || o->checkpoint_every || o->keep_last || o->keep_best))
        shmtrain_bad("--no-checkpoint and %s: give one", rq->checkpoint_named ? "--checkpoint"
                     : o->checkpoint_every ? "--checkpoint-every" : o->keep_last ? "--keep" : "--keep-best");
    if (o->keep_last && !o->checkpoint_every)
        shmtrain_bad("--keep %d keeps the periodic checkpoints of --checkpoint-every K, K > 0 (this run makes none)",
                     o->keep_last);
    if (rq->overwrite && !rq->out && !rq->checkpoint_named && !rq->metrics_named)
        shmtrain_bad("--overwrite goes with --out DIR, --checkpoint FILE or --metrics FILE (a default run folder is "
                     "always new)");
    if (o->evaluate_only && (o->checkpoint_every || o->keep_last || o->keep_best))
        shmtrain_bad("--max-steps 0 evaluates and trains nothing: it saves no checkpoint (leave out %s)",
                     o->checkpoint_every ? "--checkpoint-every" : o->keep_last ? "--keep" : "--keep-best");
    if (o->balance == ST_BALANCE_INDEPENDENT && o->check_replicas)
        shmtrain_bad("--check-replicas: --balance independent trains a model per instance, which differ by design; "
                     "give one");
    if (o->optim.kind == ST_OPTIM_ADAMW && !momentum_set)
        o->optim.momentum = 0;
    if (o->optim.nesterov && o->optim.momentum <= 0)
        shmtrain_bad("--nesterov needs --momentum > 0");
    if (o->tokens_bin && o->ntext)
        shmtrain_bad("--tokens-bin and --text: give the language model one of them");
    if ((o->val_bin || o->vocab) && !o->tokens_bin)
        shmtrain_bad("%s belongs to --tokens-bin FILE", o->val_bin ? "--val-bin" : "--vocab");
    if (!o->npy_images != !o->npy_labels)
        shmtrain_bad("--npy-images and --npy-labels come together");
    if (!o->npy_test_images != !o->npy_test_labels)
        shmtrain_bad("--npy-test-images and --npy-test-labels come together");
    if (!!o->image_folder + !!o->npy_images + !!o->cifar_dir + !!(o->train_images || o->test_images) > 1)
        shmtrain_bad("give one image source: --image-folder, --npy-images, --cifar or the IDX files");
    if ((o->image_size || o->data_memory_gb > 0) && !o->image_folder)
        shmtrain_bad("%s belongs to --image-folder ROOT", o->image_size ? "--image-size" : "--data-memory");
    if (o->npy_test_images && !o->npy_images)
        shmtrain_bad("--npy-test-images: give the training arrays too (--npy-images, --npy-labels)");
    if (rq->checkpoint_named)  /* the default goes in the run folder, checked there */
        check_output_path("--checkpoint", o->checkpoint);
    if (rq->metrics_named)
        check_output_path("--metrics", o->metrics);
}

static bool asks_for(int argc, char **argv, const char *a, const char *b)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], a) || (b && !strcmp(argv[i], b)))
            return true;
    return false;
}

/* The flags that say where a run's outputs go, for run_dir_prepare. */
static bool run_dir_flag(int c, char *v, struct run_dir_request *rq)
{
    switch (c) {
    case O_OUT: rq->out = v; break;
    case O_OVERWRITE: rq->overwrite = true; break;
    case O_NOCKPT: rq->no_checkpoint = true; break;
    case O_CONFIG: break;  /* read by merge_line */
    case O_CKPT: rq->checkpoint_named = true; return false;
    case O_METRICS: rq->metrics_named = true; return false;
    default: return false;
    }
    return true;
}

enum shmtrain_action shmtrain_parse(int argc, char **argv, st_train_options *o, struct run_dir_request *rq)
{
    shmtrain_check_spelling(argc, argv, training_flags, "");
    /* --help and --version answer whatever else the line holds (a model
     * that does not load included), as git's and gcc's do. */
    if (asks_for(argc, argv, "--help", "-h"))
        return ACTION_HELP;
    if (asks_for(argc, argv, "--version", NULL))
        return ACTION_VERSION;
    int n;
    char **words = shmtrain_merge_line(argc, argv, training_flags, o, &n);
    bool momentum_set = false, summary = false;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(n, words, ":h", training_flags, NULL)) != -1) {
        if (c == O_RESUME && !optarg && optind < n && words[optind][0] != '-')
            optarg = words[optind++];  /* "--resume FILE" as users type it: shmtrain has no operands */
        if (run_dir_flag(c, optarg, rq) || model_or_data_flag(c, optarg, o) ||
            optimisation_flag(c, optarg, o, &momentum_set) || output_or_run_flag(c, optarg, o))
            continue;
        if (c == O_SUMMARY)
            summary = true;
        else if (c == ':')
            shmtrain_bad("%s needs a value", words[optind - 1]);
        else
            shmtrain_bad("unknown option '%s'", words[optind - 1]);
    }
    if (optind < n)
        shmtrain_bad("unexpected argument '%s'", words[optind]);
    if (summary)
        return ACTION_SUMMARY;
    check_combinations(o, rq, momentum_set);
    rq->config_text = shmtrain_settings_text(o, rq->no_checkpoint);
    return ACTION_TRAIN;
}
