/* shmtrain's training flags (src/shmtrain_options.h).  One table gives each
 * flag its name, value, field, range, help group and help text; getopt's
 * table, the reader, --help and config.txt all walk it, so a new flag is one
 * row.  The checks across flags follow the table. */
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

/* What one reading of the line fills. */
struct parse {
    st_train_options *o;
    struct run_dir_request *rq;
    bool momentum_set;
    enum { SUMMARY_NONE, SUMMARY_LAYERS, SUMMARY_KERNELS } summary;
};

/* How a flag's value is read and where it goes; K_HEADING rows name the
 * help's groups, K_HOOK flags are read by their `then` alone. */
enum flag_kind { K_HEADING, K_STR, K_INT, K_LONG, K_U64, K_FLOAT, K_DOUBLE, K_BOOL, K_OFF_BOOL, K_DTYPE, K_CHOICE,
                 K_HOOK };

enum flag_trait {
    SETTING = 1,     /* config.txt repeats it (outputs and one-off actions do not) */
    SKIP_ZERO = 2,   /* zero means "not given" there */
    OPTIONAL = 4,    /* the value may be left out (--resume) */
    IN_REQUEST = 8,  /* the field is run_dir_request's, not st_train_options' */
};

struct flag {
    const char *name;
    const char *value;          /* the value's name in the help (a choice's: its words); NULL: the flag takes none */
    enum flag_kind kind;
    size_t offset, size;        /* the field */
    double min, max;            /* a number's range */
    const char *const *choices; /* K_CHOICE: the words by the field's value */
    unsigned traits;
    void (*then)(struct parse *p, const char *v);  /* what the flag means beyond its field, or NULL */
    const char *help;           /* '\n' continues it on the next line, under the first */
};

static const char *const optimizers[] = {"sgd", "adamw", NULL}, *const schedules[] = {"constant", "step", "cosine", NULL},
                         *const token_kinds[] = {"chars", "bytes", NULL},
                         *const balances[] = {"static", "dynamic", "independent", NULL};

static void then_cifar100(struct parse *p, const char *v) { (void)v; p->o->cifar100 = true; }
static void then_cifar10(struct parse *p, const char *v) { (void)v; p->o->cifar100 = false; }
static void then_momentum(struct parse *p, const char *v) { (void)v; p->momentum_set = true; }
static void then_summary(struct parse *p, const char *v)
{
    if (v && strcmp(v, "kernels"))
        shmtrain_bad("--summary: '%s': the one value it takes is 'kernels'", v);
    p->summary = v ? SUMMARY_KERNELS : SUMMARY_LAYERS;
}
static void then_checkpoint(struct parse *p, const char *v) { (void)v; p->rq->checkpoint_named = true; }
static void then_metrics(struct parse *p, const char *v) { (void)v; p->rq->metrics_named = true; }
static void then_config(struct parse *p, const char *v) { (void)p, (void)v; }  /* read by merge_line */
static void then_resume(struct parse *p, const char *v) { p->o->resume = v ? v : ""; }  /* "": run_dir_prepare says which */
/* nothing trained: an evaluation of what it starts from */
static void then_max_steps(struct parse *p, const char *v) { (void)v; p->o->evaluate_only = p->o->max_steps == 0; }

static void then_text(struct parse *p, const char *v)
{
    if (p->o->ntext == 2)
        shmtrain_bad("--text: at most two (training, then validation)");
    p->o->text[p->o->ntext++] = v;
}

static void then_precision(struct parse *p, const char *v)
{
    (void)v;
    if (st_nn_precision_check(p->o->precision, ST_BACKEND_ONEDNN, &p->o->tuning) != ST_OK)
        shmtrain_bad("--%s", st_last_error());
}

#define OPT(f) offsetof(st_train_options, f), sizeof(((st_train_options *)0)->f)
#define REQ(f) offsetof(struct run_dir_request, f), sizeof(((struct run_dir_request *)0)->f)
#define HEADING(text) {text, NULL, K_HEADING, 0, 0, 0, 0, NULL, 0, NULL, NULL}
#define TEXT(name, value, at, traits, then, help) {name, value, K_STR, at, 0, 0, NULL, traits, then, help}
#define NUMBER(name, value, kind, at, min, max, traits, then, help) \
    {name, value, kind, at, min, max, NULL, traits, then, help}
#define SWITCH(name, kind, at, traits, help) {name, NULL, kind, at, 0, 0, NULL, traits, NULL, help}
#define CHOICE(name, at, words, traits, help) {name, "WORD", K_CHOICE, at, 0, 0, words, traits, NULL, help}
#define DTYPE(name, value, at, traits, then, help) {name, value, K_DTYPE, at, 0, 0, NULL, traits, then, help}
#define HOOK(name, value, traits, then, help) {name, value, K_HOOK, 0, 0, 0, 0, NULL, traits, then, help}

static const struct flag flags[] = {
    HEADING("model"),
    TEXT("model", "NAME|FILE", OPT(model), SETTING | SKIP_ZERO, NULL,
         "mlp, lenet, cnn, resnet, gpt-mini, gpt, gpt2 or a model file (default lenet)"),
    HOOK("summary", "[kernels]", OPTIONAL, then_summary,
         "print the model's layers, output shapes and parameters, and exit; with kernels,\n"
         "also build the net as the run would and print each layer's kernels and what\n"
         "chose them (the run folder's kernels.txt)"),
    TEXT("init-from", "MODEL.safetensors", OPT(init_from), SETTING | SKIP_ZERO, NULL,
         "start from these weights (shmtrain export's, by PyTorch's names)"),
    HEADING("data"),
    TEXT("data", "DIR", OPT(data_dir), SETTING | SKIP_ZERO, NULL,
         "IDX directory (default /usr/share/datasets/fashion-mnist)"),
    TEXT("train-images", "F", OPT(train_images), SETTING | SKIP_ZERO, NULL, "IDX files instead: the training images"),
    TEXT("train-labels", "F", OPT(train_labels), SETTING | SKIP_ZERO, NULL, "their labels"),
    TEXT("test-images", "F", OPT(test_images), SETTING | SKIP_ZERO, NULL, "the test images"),
    TEXT("test-labels", "F", OPT(test_labels), SETTING | SKIP_ZERO, NULL, "their labels"),
    TEXT("cifar", "DIR", OPT(cifar_dir), 0, then_cifar10, "CIFAR-10 binary batches instead"),
    TEXT("cifar100", "DIR", OPT(cifar_dir), 0, then_cifar100, "CIFAR-100's"),
    TEXT("npy-images", "F", OPT(npy_images), SETTING | SKIP_ZERO, NULL,
         "NumPy arrays (np.save) instead: images uint8 or float32 in [0,1],\nNHWC or NCHW"),
    TEXT("npy-labels", "F", OPT(npy_labels), SETTING | SKIP_ZERO, NULL, "their labels, integers"),
    TEXT("npy-test-images", "F", OPT(npy_test_images), SETTING | SKIP_ZERO, NULL, "the test images (optional)"),
    TEXT("npy-test-labels", "F", OPT(npy_test_labels), SETTING | SKIP_ZERO, NULL, "their labels"),
    TEXT("image-folder", "ROOT", OPT(image_folder), SETTING | SKIP_ZERO, NULL,
         "images (PNG, JPEG) in torchvision's ImageFolder layout: ROOT/train/CLASS/*\n"
         "and ROOT/val/CLASS/*, or ROOT/CLASS/* (then --val-fraction is held out)"),
    NUMBER("image-size", "S", K_INT, OPT(image_size), 1, 16384, SETTING | SKIP_ZERO, NULL,
           "resize the shorter side to S, then crop the model's input from the centre"),
    NUMBER("data-memory", "GB", K_DOUBLE, OPT(data_memory_gb), 1e-9, 1e6, SETTING | SKIP_ZERO, NULL,
           "a folder decoding to more is streamed batch by batch (a quarter of RAM)"),
    NUMBER("data-workers", "N", K_INT, OPT(data_workers), 0, 256, SETTING, NULL,
           "streaming: decoding threads per instance, a batch ahead (2)"),
    NUMBER("val-fraction", "F", K_FLOAT, OPT(val_fraction), 0, 0.9, SETTING, NULL,
           "held out for testing when the data has no test split (0.1)"),
    NUMBER("train-subset", "N", K_LONG, OPT(train_subset), 1, ONE_BILLION, SETTING | SKIP_ZERO, NULL,
           "use only the first N training samples"),
    NUMBER("test-subset", "N", K_LONG, OPT(test_subset), 1, ONE_BILLION, SETTING | SKIP_ZERO, NULL,
           "use only the first N test samples"),
    SWITCH("augment", K_BOOL, OPT(augment), SETTING, "random crop (padding 4) and horizontal flip"),
    HOOK("text", "PATH", 0, then_text,
         "a language model's text: a file or a directory of files; its last 10%\n"
         "validates, or give --text twice (training, validation)"),
    CHOICE("tokens", OPT(text_tokens), token_kinds, SETTING,
           "token ids: the text's characters (default) or all 256 bytes"),
    TEXT("tokens-bin", "F", OPT(tokens_bin), SETTING | SKIP_ZERO, NULL,
         "token ids from another tokenizer: nanoGPT's .bin (uint16) or llm.c's"),
    TEXT("val-bin", "F", OPT(val_bin), SETTING | SKIP_ZERO, NULL, "their validation ids (without it the last 10% validates)"),
    NUMBER("vocab", "N", K_LONG, OPT(vocab), 1, 65536, SETTING | SKIP_ZERO, NULL, "their ids are < N"),
    HEADING("optimisation"),
    NUMBER("epochs", "N", K_INT, OPT(epochs), 1, 1000000, SETTING | SKIP_ZERO, NULL,
           "passes over the data (1; with --max-steps alone, as many as it takes)"),
    NUMBER("max-steps", "N", K_LONG, OPT(max_steps), 0, LONG_MAX, SETTING | SKIP_ZERO, then_max_steps,
           "the step budget (with --epochs too, whichever ends first; 0: evaluate only)"),
    NUMBER("batch-size", "B", K_INT, OPT(batch), 1, 1 << 20, SETTING, NULL, "samples per instance and micro-batch (64)"),
    NUMBER("grad-accum", "N", K_INT, OPT(grad_accum), 1, 4096, SETTING | SKIP_ZERO, NULL,
           "micro-batches of B per optimizer step, their gradients averaged and\n"
           "exchanged once (nanoGPT's gradient_accumulation_steps; 1)"),
    CHOICE("balance", OPT(balance), balances, SETTING,
           "static: each instance its own micro-batches (the default);\n"
           "dynamic: a node's instances take the step's instances x N\n"
           "micro-batches from a shared counter, so none waits for a slow one;\n"
           "independent: no exchange, each trains its own model on its shard\n"
           "(the speed the machine allows without synchronising)"),
    CHOICE("optimizer", OPT(optim.kind), optimizers, SETTING, "SGD with momentum, or AdamW (sgd)"),
    NUMBER("lr", "LR", K_FLOAT, OPT(schedule.lr), 0, 100, SETTING, NULL, "the learning rate (0.05)"),
    NUMBER("momentum", "M", K_FLOAT, OPT(optim.momentum), 0, 0.999, SETTING, then_momentum, "(0.9; AdamW's beta1)"),
    SWITCH("nesterov", K_BOOL, OPT(optim.nesterov), SETTING, "Nesterov's momentum (SGD)"),
    NUMBER("weight-decay", "W", K_FLOAT, OPT(optim.weight_decay), 0, 1, SETTING, NULL,
           "(0; language models: matrices only)"),
    NUMBER("beta2", "B", K_FLOAT, OPT(optim.beta2), 0, 0.99999, SETTING | SKIP_ZERO, NULL, "AdamW's (0.999)"),
    NUMBER("clip-norm", "C", K_FLOAT, OPT(clip_norm), 0, 1e6, SETTING | SKIP_ZERO, NULL,
           "clip the gradient's norm to C (off)"),
    SWITCH("scale-lr", K_BOOL, OPT(scale_lr), SETTING, "lr x instances"),
    CHOICE("schedule", OPT(schedule.kind), schedules, SETTING, "the learning rate's (constant)"),
    NUMBER("warmup", "STEPS", K_U64, OPT(schedule.warmup), 0, LONG_MAX, SETTING, NULL, "linear from 0 over STEPS"),
    NUMBER("step-size", "STEPS", K_U64, OPT(schedule.step_size), 1, LONG_MAX, SETTING | SKIP_ZERO, NULL,
           "step schedule: lr x G every STEPS"),
    NUMBER("gamma", "G", K_FLOAT, OPT(schedule.gamma), 0, 1, SETTING | SKIP_ZERO, NULL, "step schedule's factor"),
    NUMBER("min-lr", "LR", K_FLOAT, OPT(schedule.min_lr), 0, 100, SETTING, NULL, "cosine schedule's floor"),
    NUMBER("seed", "S", K_U64, OPT(seed), 0, LONG_MAX, SETTING, NULL, "(1)"),
    NUMBER("target-accuracy", "A", K_FLOAT, OPT(target_accuracy), 0, 1, SETTING | SKIP_ZERO, NULL,
           "stop once the test accuracy reaches A"),
    NUMBER("target-loss", "L", K_FLOAT, OPT(target_loss), 0, 1e6, SETTING | SKIP_ZERO, NULL,
           "stop once the validation loss is at most L (language models)"),
    HEADING("evaluation and outputs"),
    NUMBER("eval-every", "K", K_LONG, OPT(eval_every), 0, LONG_MAX, SETTING, NULL, "steps (0 = each epoch)"),
    NUMBER("eval-windows", "N", K_LONG, OPT(eval_windows), 0, ONE_BILLION, SETTING, NULL,
           "language models' validation windows (256; 0 = all)"),
    NUMBER("log-every", "K", K_LONG, OPT(log_every), 1, LONG_MAX, SETTING, NULL, "steps (50)"),
    SWITCH("quiet", K_BOOL, OPT(quiet), 0, "print only the summary"),
    TEXT("out", "DIR", REQ(out), IN_REQUEST, NULL,
         "the run's folder: shmtrain.ckpt, metrics.jsonl, TensorBoard's events,\n"
         "scalars.csv, console.log, config.txt (default runs/MODEL-JOB or\n"
         "runs/MODEL-UTC TIME; runs/latest: the newest's checkpoint)"),
    HOOK("resume", "[DIR|FILE]", OPTIONAL, then_resume,
         "go on from a run's folder (alone: runs/latest) or a checkpoint file"),
    TEXT("checkpoint", "FILE", OPT(checkpoint), 0, then_checkpoint, "the checkpoint here, not in the run folder"),
    TEXT("metrics", "FILE", OPT(metrics), 0, then_metrics, "the metrics here, not in the run folder"),
    SWITCH("no-checkpoint", K_BOOL, REQ(no_checkpoint), IN_REQUEST, "save none"),
    SWITCH("overwrite", K_BOOL, REQ(overwrite), IN_REQUEST,
           "write over the run in --out DIR, --checkpoint or --metrics (an output\n"
           "holding a result is refused unless resumed or overwritten)"),
    NUMBER("checkpoint-every", "K", K_LONG, OPT(checkpoint_every), 0, LONG_MAX, SETTING | SKIP_ZERO, NULL,
           "also every K steps (a failed one is a warning)"),
    NUMBER("keep", "K", K_INT, OPT(keep_last), 1, 1000000, SETTING | SKIP_ZERO, NULL,
           "keep the last K of those as FILE-stepN.ckpt"),
    SWITCH("keep-best", K_BOOL, OPT(keep_best), SETTING,
           "best.ckpt: the best evaluation's (validation loss, or test accuracy)"),
    HOOK("config", "FILE", 0, then_config,
         "settings as 'key value' lines (a run's config.txt repeats it); flags\n"
         "given on the command line replace the file's"),
    HEADING("several instances"),
    DTYPE("allreduce-dtype", "fp32|bf16|fp16", OPT(allreduce_dtype), SETTING, NULL,
          "the gradient exchange (bf16, fp16: half the bytes, summed in fp32)"),
    NUMBER("bucket-mb", "MB", K_DOUBLE, OPT(bucket_mb), 0, 1024, SETTING | SKIP_ZERO, NULL,
           "all-reduce gradients in buckets of MB during backward (0: after it)"),
    NUMBER("check-replicas", "K", K_LONG, OPT(check_replicas), 1, LONG_MAX, SETTING | SKIP_ZERO, NULL,
           "check every K steps that all instances hold identical parameters"),
    SWITCH("tune", K_BOOL, OPT(tune), 0,
           "measure the engine's kernels for this model on this CPU first and keep the\n"
           "answer (~/.cache/shmtrain); later runs read it (docs/engine.md)"),
    HEADING("precision"),
    DTYPE("precision", "fp32|bf16", OPT(precision), SETTING, then_precision,
          "compute: bf16 runs convolutions and linear layers in bf16 (native bf16\n"
          "CPUs: AVX512-BF16 or AMX), parameters and optimizer stay fp32"),
    SWITCH("no-flush-denormals", K_OFF_BOOL, OPT(flush_denormals), SETTING, "keep denormal floats (slower late in training)"),
    HOOK("version", NULL, 0, NULL, NULL),
    HOOK("help", NULL, 0, NULL, NULL),
};
#define FLAGS (sizeof flags / sizeof *flags)

/* getopt's table, from the flags': each flag's code is 256 + its row. */
static const struct option *getopt_table(void)
{
    static struct option table[FLAGS + 1];
    if (table[0].name)
        return table;
    size_t n = 0;
    for (size_t i = 0; i < FLAGS; i++)
        if (flags[i].kind != K_HEADING)
            table[n++] = (struct option){flags[i].name, !flags[i].value ? no_argument
                                                        : flags[i].traits & OPTIONAL ? optional_argument
                                                                                     : required_argument,
                                         NULL, 256 + (int)i};
    return table;
}

static size_t kind_size(enum flag_kind kind)
{
    switch (kind) {
    case K_STR: return sizeof(const char *);
    case K_INT: case K_CHOICE: return sizeof(int);
    case K_LONG: return sizeof(long);
    case K_U64: return sizeof(uint64_t);
    case K_FLOAT: return sizeof(float);
    case K_DOUBLE: return sizeof(double);
    case K_BOOL: case K_OFF_BOOL: return sizeof(bool);
    case K_DTYPE: return sizeof(st_dtype);
    default: return 0;
    }
}

/* "a, b or c" of a choice's words, for its refusal. */
static void choice_words(const char *const *words, char *buf, size_t len)
{
    size_t used = 0;
    for (int i = 0; words[i] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i == 0 ? "" : words[i + 1] ? ", " : " or ", words[i]);
}

static long whole_bound(double b) { return b >= (double)LONG_MAX ? LONG_MAX : (long)b; }

/* The flag's value into its field, as its kind reads it. */
static void store(const struct flag *f, const char *v, struct parse *p)
{
    char *field = (f->traits & IN_REQUEST ? (char *)p->rq : (char *)p->o) + f->offset, flag[64], words[128];
    if (kind_size(f->kind) != f->size)
        shmtrain_bad("--%s: the flags' table gives it a field of %zu bytes", f->name, f->size);
    snprintf(flag, sizeof flag, "--%s", f->name);
    switch (f->kind) {
    case K_STR: *(const char **)field = v; break;
    case K_INT: *(int *)field = (int)shmtrain_whole(flag, v, whole_bound(f->min), whole_bound(f->max)); break;
    case K_LONG: *(long *)field = shmtrain_whole(flag, v, whole_bound(f->min), whole_bound(f->max)); break;
    case K_U64: *(uint64_t *)field = (uint64_t)shmtrain_whole(flag, v, whole_bound(f->min), whole_bound(f->max)); break;
    case K_FLOAT: *(float *)field = (float)shmtrain_number(flag, v, f->min, (float)f->max); break;
    case K_DOUBLE: *(double *)field = shmtrain_number(flag, v, f->min, f->max); break;
    case K_BOOL: *(bool *)field = true; break;
    case K_OFF_BOOL: *(bool *)field = false; break;
    case K_DTYPE:
        if (!st_dtype_parse(v, (st_dtype *)field))
            shmtrain_bad("%s '%s': use fp32, bf16 or fp16", flag, v);
        break;
    case K_CHOICE: {  /* the field's values in the order of the words */
        int k = 0;
        while (f->choices[k] && strcmp(v, f->choices[k]))
            k++;
        choice_words(f->choices, words, sizeof words);
        if (!f->choices[k])
            shmtrain_bad("%s '%s': use %s", flag, v, words);
        *(int *)field = k;
        break;
    }
    case K_HEADING: case K_HOOK: break;
    }
    if (f->then)
        f->then(p, v);
}

void shmtrain_usage(FILE *f)
{
    fprintf(f,
"usage: shmtrain [options]                     train (under shmrun for several instances)\n"
"       shmtrain sample --checkpoint FILE --prompt TEXT [options]   continue a text (sample --help)\n"
"       shmtrain export --checkpoint FILE --out MODEL.safetensors   for PyTorch (export --help)\n"
"       shmtrain --version | --help\n");
    for (size_t i = 0; i < FLAGS; i++) {
        const struct flag *fl = &flags[i];
        if (fl->kind == K_HEADING) {
            fprintf(f, "%s:\n", fl->name);
            continue;
        }
        if (!fl->help)
            continue;
        char named[96], words[64] = "";
        if (fl->kind == K_CHOICE)  /* its words, as the value's name */
            for (int k = 0; fl->choices[k]; k++)
                snprintf(words + strlen(words), sizeof words - strlen(words), "%s%s", k ? "|" : "", fl->choices[k]);
        const char *value = fl->kind == K_CHOICE ? words : fl->value;
        const int width = snprintf(named, sizeof named, "--%s%s%s", fl->name, value ? " " : "", value ? value : "");
        fprintf(f, "  %-*s", width < 24 ? 25 : width + 4, named);
        for (const char *h = fl->help; *h;) {  /* a continued line under the first */
            const size_t line = strcspn(h, "\n");
            fprintf(f, "%.*s\n", (int)line, h);
            h += line + (h[line] == '\n');
            if (*h)
                fprintf(f, "%27s", "");
        }
    }
    fprintf(f, "exit status: 0 done, 1 failed, 2 bad flag, 75 stopped because another instance failed,\n"
               "  130 stopped on request (checkpointed)\n");
}

/* ---------------------------------------------------- the settings in effect --
 * config.txt repeats a run: every setting that shapes it, with the value it
 * had (a default as much as a flag), so that a later change of a default
 * does not change what the file repeats.  Read back by --config, each
 * gives the same field (floats printed to their last bit). */

/* One setting's value as text into buf; false when it is not to be written. */
static bool setting_value(const struct flag *s, const st_train_options *o, char *buf, size_t len)
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
    case K_HEADING: case K_HOOK: return false;
    }
    return !(s->traits & SKIP_ZERO && number == 0);
}

static void write_setting(FILE *f, const char *key, const char *value, bool quote)
{
    char *quoted = quote ? st_config_quote(value) : NULL;
    if (quote && !quoted)
        shmtrain_bad("out of memory");
    fprintf(f, quoted ? "%s %s\n" : "%s\n", key, quoted);
    free(quoted);
}

char *shmtrain_settings_text(const st_train_options *o, bool no_checkpoint)
{
    char *text = NULL, value[4200];
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        shmtrain_bad("out of memory");
    fprintf(f, "# the settings in effect; `shmtrain --config THIS` repeats the run (shmrun -n as `instances` says)\n");
    for (size_t i = 0; i < FLAGS; i++) {
        if (!(flags[i].traits & SETTING) || !setting_value(&flags[i], o, value, sizeof value))
            continue;
        if (!strcmp(flags[i].name, "data") && (o->cifar_dir || o->image_folder || o->npy_images || o->ntext ||
                                                o->tokens_bin || o->train_images))
            continue;  /* another source replaces the default IDX folder */
        write_setting(f, flags[i].name, value, value[0] || flags[i].kind == K_STR);
    }
    if (o->cifar_dir)  /* one field for two flags */
        write_setting(f, o->cifar100 ? "cifar100" : "cifar", o->cifar_dir, true);
    for (int i = 0; i < o->ntext; i++)
        write_setting(f, "text", o->text[i], true);
    if (no_checkpoint)
        fprintf(f, "no-checkpoint\n");
    if (o->evaluate_only)
        fprintf(f, "max-steps 0\n");
    if (fclose(f) != 0)
        shmtrain_bad("out of memory");
    return text;
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

enum shmtrain_action shmtrain_parse(int argc, char **argv, st_train_options *o, struct run_dir_request *rq)
{
    const struct option *table = getopt_table();
    shmtrain_check_spelling(argc, argv, table, "");
    /* --help and --version answer whatever else the line holds (a model
     * that does not load included), as git's and gcc's do. */
    if (asks_for(argc, argv, "--help", "-h"))
        return ACTION_HELP;
    if (asks_for(argc, argv, "--version", NULL))
        return ACTION_VERSION;
    int n;
    char **words = shmtrain_merge_line(argc, argv, table, o, &n);
    struct parse p = {.o = o, .rq = rq};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(n, words, ":h", table, NULL)) != -1) {
        if (c >= 256 && (size_t)(c - 256) < FLAGS) {
            const struct flag *f = &flags[c - 256];
            if (f->traits & OPTIONAL && !optarg && optind < n && words[optind][0] != '-')
                optarg = words[optind++];  /* "--resume FILE" as users type it: shmtrain has no operands */
            store(f, optarg, &p);
        } else if (c == ':') {
            shmtrain_bad("%s needs a value", words[optind - 1]);
        } else {
            shmtrain_bad("unknown option '%s'", words[optind - 1]);
        }
    }
    if (optind < n)
        shmtrain_bad("unexpected argument '%s'", words[optind]);
    if (p.summary)
        return p.summary == SUMMARY_KERNELS ? ACTION_SUMMARY_KERNELS : ACTION_SUMMARY;
    check_combinations(o, rq, p.momentum_set);
    rq->config_text = shmtrain_settings_text(o, rq->no_checkpoint);
    return ACTION_TRAIN;
}
