/* shmtrain: train a model with N data-parallel instances on one machine.
 * Run it under shmrun (`shmrun -n 2 -- shmtrain ...`) or alone (one
 * instance).  docs/training.md is the manual. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <pthread.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/env.h"
#include "shmtrain/nn.h"
#include "shmtrain/text.h"
#include "shmtrain/lifeline.h"
#include "shmtrain/train.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: shmtrain [options]            (under shmrun for several instances)\n"
"       shmtrain sample --checkpoint FILE --prompt TEXT [--tokens N] ...   (shmtrain sample --help)\n"
"       shmtrain --version           this build, and the oneDNN it runs on\n"
"model and data:\n"
"  --model NAME|FILE        mlp, lenet, cnn, resnet, gpt-mini, gpt, gpt2 or a model file (default lenet)\n"
"  --summary                print the model's layers, output shapes and parameters, and exit\n"
"  --data DIR               IDX directory (default /usr/share/datasets/fashion-mnist)\n"
"  --train-images F --train-labels F --test-images F --test-labels F   IDX files\n"
"  --cifar DIR              CIFAR-10 binary batches instead; --cifar100 for CIFAR-100\n"
"  --npy-images F --npy-labels F [--npy-test-images F --npy-test-labels F]   NumPy arrays (np.save):\n"
"                           images uint8 or float32 in [0,1], NHWC or NCHW; labels integers\n"
"  --image-folder ROOT      images (PNG, JPEG) in torchvision's ImageFolder layout: ROOT/train/CLASS/*\n"
"                           and ROOT/val/CLASS/*, or ROOT/CLASS/* (then --val-fraction is held out)\n"
"  --image-size S           resize the shorter side to S, then crop the model's input from the centre\n"
"                           (default: the input's side)\n"
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
"                           (default: the model's vocabulary)\n"
"  --eval-windows N         validation windows per evaluation (256; 0 = all)\n"
"training:\n"
"  --epochs N (1; with --max-steps alone, as many as it takes)   --max-steps N (the step budget;\n"
"                   with --epochs too, whichever ends first)   --batch-size B (64, per instance)\n"
"  --grad-accum N (1)       micro-batches of B per optimizer step, their gradients averaged and\n"
"                           exchanged once (nanoGPT's gradient_accumulation_steps)\n"
"  --optimizer sgd|adamw (sgd)   --lr LR (0.05)   --momentum M (0.9)   --nesterov\n"
"  --weight-decay W (0; language models: matrices only)   --beta2 B (AdamW, 0.999)\n"
"  --clip-norm C (off)   --scale-lr (lr x instances)\n"
"  --schedule constant|step|cosine   --warmup STEPS   --step-size STEPS --gamma G   --min-lr LR\n"
"  --seed S (1)   --target-accuracy A (stop once the test accuracy reaches A)\n"
"  --target-loss L          stop once the validation loss is at most L (language models)\n"
"  --no-flush-denormals     keep denormal floats (slower late in training)\n"
"evaluation, output, checkpoints:\n"
"  --eval-every K (0 = each epoch)   --log-every K (50)   --metrics FILE   --quiet\n"
"  --checkpoint FILE (shmtrain.ckpt)   --checkpoint-every K   --resume [FILE]\n"
"  --init-from MODEL.safetensors    start from these weights (shmtrain export's, by PyTorch's names)\n"
"exit status: 0 done, 1 failed, 2 bad flag, 130 stopped on request (checkpointed),\n"
"  75 stopped because another instance failed\n"
"  --check-replicas K       check every K steps that all instances hold identical parameters\n"
"  --precision fp32|bf16    compute: bf16 runs convolutions and linear layers in bf16 (native bf16\n"
"                           CPUs: AVX512-BF16 or AMX), parameters and optimizer stay fp32\n"
"  --allreduce-dtype fp32|bf16   the gradient exchange (bf16: half the bytes, summed in fp32)\n"
"  --bucket-mb MB           all-reduce gradients in buckets of MB during backward (0: after it)\n");
}

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shmtrain: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see shmtrain --help)\n");
    va_end(ap);
    exit(2);
}

/* --summary: the model's layers, shapes and parameters; with --precision
 * bf16, what each layer of the net built at --batch computes in and keeps. */
static int print_summary(const st_train_options *o)
{
    st_model *m = NULL;
    st_net *n = NULL;
    if (st_model_load(&m, o->model) != ST_OK)
        goto fail;
    st_model_summary(m, stdout);
    if (o->precision != ST_DTYPE_F32) {
        const st_net_config nc = {.batch = o->batch, .precision = o->precision, .tuning = o->tuning};
        if (st_net_create(&n, m, &nc) != ST_OK)
            goto fail;
        printf("\n");
        st_net_describe_precision(n, stdout);
        st_net_destroy(n);
    }
    st_model_destroy(m);
    return 0;
fail:
    fprintf(stderr, "shmtrain: %s\n", st_last_error());
    st_model_destroy(m);
    return 1;
}

static st_dtype dtype_flag(const char *flag, const char *v)
{
    st_dtype t;
    if (!st_dtype_parse(v, &t))
        bad("%s '%s': use fp32 or bf16", flag, v);
    return t;
}

/* A whole number in [min, max]: strtol alone lets "4294967312" through,
 * and an (int) cast would then train with batch 16. */
static long whole(const char *flag, const char *v, long min, long max)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end)
        bad("%s '%s': not a whole number", flag, v);
    if (errno == ERANGE || x > max)
        bad("%s %s: must be at most %ld", flag, v, max);
    if (x < min)
        bad("%s %ld: must be at least %ld", flag, x, min);
    return x;
}

#define ONE_BILLION 1000000000L

static double number(const char *flag, const char *v, double min, double max)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* ERANGE with a tiny result is underflow (1e-400 is 0 to a double): still a number */
    if ((errno && !(errno == ERANGE && fabs(x) <= DBL_MIN)) || end == v || *end || !(x >= min && x <= max))
        bad("%s '%s': not a number in [%g, %g]", flag, v, (double)min, (double)max);
    return x;
}

/* Ctrl-C and SIGTERM are taken by a thread of their own with sigwait, never
 * by a handler.  A handler's frame is pushed onto whichever thread the
 * signal lands on, and oneDNN 2.6's gemm:jit kernels point rsp into the heap
 * while they run (oneDNN issue #4845, fixed in 3.11): a frame pushed there
 * corrupts the heap.  A no-op SIGUSR1 handler did so in 5 of 5 two-instance
 * mlp runs on plain inner-product weights, 0 of 5 with the same handler on
 * an alternate stack.  Blocking the signals before any thread exists makes
 * every OpenMP and oneDNN thread inherit the mask. */
struct signal_watch {
    sigset_t set;
    pid_t launcher;  /* st_lifeline_launcher(); 0: none to die with */
};

/* The first SIGINT/SIGTERM/SIGHUP asks for a stop after the step (a checkpoint,
 * exit 130); a second kills, as it would by default.  With a launcher, the
 * thread also wakes every ST_LIFELINE_POLL_MS to see whether it is still
 * there, and a SIGTERM that comes after its death (shmrun's death signal)
 * is no request to stop cleanly: there is nobody left to report to. */
static void *signal_thread(void *arg)
{
    const struct signal_watch *w = arg;
    const struct timespec poll = {0, ST_LIFELINE_POLL_MS * 1000000L};
    for (int requests = 0;;) {
        const int sig = sigtimedwait(&w->set, NULL, w->launcher ? &poll : NULL);
        if (st_lifeline_broken(w->launcher))
            st_lifeline_leave(w->launcher);
        if (sig < 0)
            continue;  /* the poll's timeout, or EINTR */
        if (requests++ == 0) {
            st_train_request_stop();
            continue;
        }
        signal(sig, SIG_DFL);
        pthread_sigmask(SIG_UNBLOCK, &w->set, NULL);
        raise(sig);
        return NULL;
    }
}

static void take_signals_in_a_thread(void)
{
    static struct signal_watch w;
    sigemptyset(&w.set);
    sigaddset(&w.set, SIGINT);
    sigaddset(&w.set, SIGTERM);
    /* The kernel's SIGHUP to a stopped instance whose launcher died (its
     * process group is orphaned), followed by SIGCONT: leave cleanly too. */
    sigaddset(&w.set, SIGHUP);
    w.launcher = st_lifeline_launcher();
    if (st_lifeline_broken(w.launcher))  /* gone before this process got here */
        st_lifeline_leave(w.launcher);
    int err = pthread_sigmask(SIG_BLOCK, &w.set, NULL);
    pthread_t t;
    if (!err)
        err = pthread_create(&t, NULL, signal_thread, &w);
    if (!err)
        err = pthread_detach(t);
    if (err) {
        fprintf(stderr, "shmtrain: cannot set up the signal thread: %s\n", strerror(err));
        exit(1);
    }
}

static void sample_usage(FILE *f)
{
    fprintf(f,
"usage: shmtrain sample --checkpoint FILE --prompt TEXT [options]\n"
"  print TEXT and its continuation by a language model's checkpoint\n"
"  --tokens N (200)   --temperature T (0.8; 0 = greedy)   --top-k K (200; 0 = all)   --seed S (1)\n");
}

static int sample_main(int argc, char **argv)
{
    enum { S_CKPT = 256, S_PROMPT, S_TOKENS, S_TEMP, S_TOPK, S_SEED };
    static const struct option opts[] = {
        {"checkpoint", 1, 0, S_CKPT}, {"prompt", 1, 0, S_PROMPT}, {"tokens", 1, 0, S_TOKENS},
        {"temperature", 1, 0, S_TEMP}, {"top-k", 1, 0, S_TOPK}, {"seed", 1, 0, S_SEED}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    st_sample_options o = {.prompt = "\n", .tokens = 200, .top_k = 200, .temperature = 0.8, .seed = 1};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case S_CKPT: o.checkpoint = optarg; break;
        case S_PROMPT: o.prompt = optarg; break;
        case S_TOKENS: o.tokens = (int)whole("--tokens", optarg, 0, 1000000); break;
        case S_TEMP: o.temperature = number("--temperature", optarg, 0, 100); break;
        case S_TOPK: o.top_k = (int)whole("--top-k", optarg, 0, 1000000); break;
        case S_SEED: o.seed = (uint64_t)whole("--seed", optarg, 0, LONG_MAX); break;
        case 'h': sample_usage(stdout); return 0;
        case ':': bad("%s needs a value", argv[optind - 1]);
        default: bad("sample: unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        bad("sample: unexpected argument '%s'", argv[optind]);
    if (!o.checkpoint)
        bad("sample: --checkpoint FILE is required");
    st_nn_flush_denormals(true);
    if (st_sample(&o, stdout) != ST_OK) {
        fprintf(stderr, "shmtrain sample: %s\n", st_last_error());
        return 1;
    }
    return 0;
}

static int export_main(int argc, char **argv)
{
    enum { E_CKPT = 256, E_OUT };
    static const struct option opts[] = {{"checkpoint", 1, 0, E_CKPT}, {"out", 1, 0, E_OUT}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *checkpoint = NULL, *out = NULL;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case E_CKPT: checkpoint = optarg; break;
        case E_OUT: out = optarg; break;
        case 'h':
            printf("usage: shmtrain export --checkpoint FILE --out MODEL.safetensors\n"
                   "  the parameters (and batch-norm statistics) in the safetensors format, named as PyTorch\n"
                   "  names them (nanoGPT's GPT keys for the GPT presets); scripts/load_export.py reads it\n");
            return 0;
        case ':': bad("%s needs a value", argv[optind - 1]);
        default: bad("export: unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        bad("export: unexpected argument '%s'", argv[optind]);
    if (!checkpoint || !out)
        bad("export: --checkpoint FILE and --out FILE are required");
    if (st_export_safetensors(checkpoint, out) != ST_OK) {
        fprintf(stderr, "shmtrain export: %s\n", st_last_error());
        return 1;
    }
    return 0;
}

/* What a bug report needs: which oneDNN (distribution's or the project's
 * prefix), and what it may use on this CPU. */
static int print_version(void)
{
    char version[32], library[512];
    st_nn_onednn_version(version, sizeof version);
    st_nn_onednn_library(library, sizeof library);
    printf("shmtrain %s\noneDNN %s (%s), ISA %s, bf16 %s\n", SHMTRAIN_VERSION, version, library, st_nn_onednn_isa(),
           st_nn_bf16_supported(NULL) ? "native" : "not native here");
    return 0;
}

/* The command line with a model's recipe in front (with_recipe), freed at
 * exit. */
static char *recipe_words, **recipe_args, *recipe_text;

static void free_recipe(void)
{
    free(recipe_words);
    free(recipe_args);
    free(recipe_text);
}

/* A model's recipe (its `train` line) as flags in front of the command
 * line's: getopt reads them first, so every flag given overrides them. */
static char **with_recipe(int *argc, char **argv, const char **recipe)
{
    const char *model = "lenet";  /* st_train_defaults' */
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < *argc)
            model = argv[i + 1];
        else if (!strncmp(argv[i], "--model=", 8))
            model = argv[i] + 8;
    }
    st_model *m = NULL;
    *recipe = NULL;
    if (st_model_load(&m, model) != ST_OK || !st_model_recipe(m)) {
        st_model_destroy(m);
        return argv;  /* no recipe; a model that does not load is reported where it is used */
    }
    const char *r = st_model_recipe(m);
    const size_t n = strlen(r);
    int pairs = 1;
    for (const char *p = r; *p; p++)
        pairs += *p == ' ';
    pairs /= 2;
    recipe_words = malloc(n + 1 + (size_t)pairs * 3);
    recipe_args = malloc(((size_t)*argc + (size_t)pairs + 1) * sizeof *recipe_args);
    if (!recipe_words || !recipe_args)
        bad("out of memory");
    char **args = recipe_args;
    atexit(free_recipe);
    args[0] = argv[0];
    int k = 1;
    char *w = recipe_words;
    for (const char *p = r; *p;) {  /* "key value key value" -> "--key=value" ... */
        const size_t key = strcspn(p, " "), value = strcspn(p + key + 1, " ");
        args[k++] = w;
        w += sprintf(w, "--%.*s=%.*s", (int)key, p, (int)value, p + key + 1) + 1;
        p += key + 1 + value;
        p += *p == ' ';
    }
    for (int i = 1; i < *argc; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    *argc = k;
    *recipe = recipe_text = strdup(r);
    st_model_destroy(m);
    return args;
}

int main(int argc, char **argv)
{
    /* Past a file-size limit (ulimit -f) a write then fails with EFBIG,
     * which every writer handles (a segment is unlinked, a checkpoint keeps
     * the previous one); SIGXFSZ's default would kill the process first and
     * leave its segments in /dev/shm. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc > 1 && !strcmp(argv[1], "sample"))
        return sample_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "export"))
        return export_main(argc - 1, argv + 1);
    if (argc == 2 && !strcmp(argv[1], "--version"))
        return print_version();
    enum { O_MODEL = 256, O_DATA, O_TRI, O_TRL, O_TEI, O_TEL, O_CIFAR, O_CIFAR100, O_TRS, O_TES, O_AUG, O_EPOCHS,
           O_MAXSTEPS, O_BATCH, O_OPT, O_LR, O_MOM, O_NEST, O_WD, O_CLIP, O_SCALE, O_SCHED, O_WARM, O_STEPSZ,
           O_GAMMA, O_MINLR, O_SEED, O_TARGET, O_NOFLUSH, O_EVAL, O_LOG, O_METRICS, O_QUIET, O_CKPT, O_CKPTE,
           O_RESUME, O_CHECK, O_ARDTYPE, O_PRECISION, O_BUCKET, O_ACCUM, O_TEXT, O_TOKENS, O_EVALWIN, O_BETA2, O_TLOSS, O_SUMMARY, O_INIT, O_TOKBIN, O_VALBIN, O_VOCAB, O_NPYI, O_NPYL, O_NPYTI, O_NPYTL, O_VALFRAC, O_IMGDIR, O_IMGSIZE, O_DATAMEM, O_DATAWORK };
    static const struct option opts[] = {
        {"model", 1, 0, O_MODEL}, {"data", 1, 0, O_DATA}, {"train-images", 1, 0, O_TRI},
        {"train-labels", 1, 0, O_TRL}, {"test-images", 1, 0, O_TEI}, {"test-labels", 1, 0, O_TEL},
        {"cifar", 1, 0, O_CIFAR}, {"cifar100", 1, 0, O_CIFAR100}, {"train-subset", 1, 0, O_TRS},
        {"test-subset", 1, 0, O_TES}, {"augment", 0, 0, O_AUG}, {"epochs", 1, 0, O_EPOCHS},
        {"max-steps", 1, 0, O_MAXSTEPS}, {"batch-size", 1, 0, O_BATCH}, {"optimizer", 1, 0, O_OPT},
        {"lr", 1, 0, O_LR}, {"momentum", 1, 0, O_MOM}, {"nesterov", 0, 0, O_NEST}, {"weight-decay", 1, 0, O_WD},
        {"clip-norm", 1, 0, O_CLIP}, {"scale-lr", 0, 0, O_SCALE}, {"schedule", 1, 0, O_SCHED},
        {"warmup", 1, 0, O_WARM}, {"step-size", 1, 0, O_STEPSZ}, {"gamma", 1, 0, O_GAMMA},
        {"min-lr", 1, 0, O_MINLR}, {"seed", 1, 0, O_SEED}, {"target-accuracy", 1, 0, O_TARGET},
        {"no-flush-denormals", 0, 0, O_NOFLUSH}, {"eval-every", 1, 0, O_EVAL}, {"log-every", 1, 0, O_LOG},
        {"metrics", 1, 0, O_METRICS}, {"quiet", 0, 0, O_QUIET}, {"checkpoint", 1, 0, O_CKPT},
        {"checkpoint-every", 1, 0, O_CKPTE}, {"resume", 2, 0, O_RESUME}, {"check-replicas", 1, 0, O_CHECK},
        {"allreduce-dtype", 1, 0, O_ARDTYPE}, {"precision", 1, 0, O_PRECISION}, {"bucket-mb", 1, 0, O_BUCKET}, {"grad-accum", 1, 0, O_ACCUM}, {"text", 1, 0, O_TEXT},
        {"tokens", 1, 0, O_TOKENS}, {"eval-windows", 1, 0, O_EVALWIN}, {"beta2", 1, 0, O_BETA2}, {"target-loss", 1, 0, O_TLOSS}, {"summary", 0, 0, O_SUMMARY}, {"init-from", 1, 0, O_INIT},
        {"tokens-bin", 1, 0, O_TOKBIN}, {"val-bin", 1, 0, O_VALBIN}, {"vocab", 1, 0, O_VOCAB},
        {"npy-images", 1, 0, O_NPYI}, {"npy-labels", 1, 0, O_NPYL}, {"npy-test-images", 1, 0, O_NPYTI},
        {"npy-test-labels", 1, 0, O_NPYTL}, {"val-fraction", 1, 0, O_VALFRAC},
        {"image-folder", 1, 0, O_IMGDIR}, {"image-size", 1, 0, O_IMGSIZE},
        {"data-memory", 1, 0, O_DATAMEM}, {"data-workers", 1, 0, O_DATAWORK},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    st_train_options o;
    st_train_defaults(&o);
    st_nn_tuning_from_env(&o.tuning);  /* the engine's switches: main() reads them, the library does not */
    argv = with_recipe(&argc, argv, &o.model_recipe);
    bool momentum_set = false, summary = false;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: o.model = optarg; break;
        case O_DATA: o.data_dir = optarg; break;
        case O_TRI: o.train_images = optarg; break;
        case O_TRL: o.train_labels = optarg; break;
        case O_TEI: o.test_images = optarg; break;
        case O_TEL: o.test_labels = optarg; break;
        case O_CIFAR: o.cifar_dir = optarg; break;
        case O_CIFAR100: o.cifar_dir = optarg; o.cifar100 = true; break;
        case O_TRS: o.train_subset = whole("--train-subset", optarg, 1, ONE_BILLION); break;
        case O_TES: o.test_subset = whole("--test-subset", optarg, 1, ONE_BILLION); break;
        case O_AUG: o.augment = true; break;
        case O_TEXT:
            if (o.ntext == 2)
                bad("--text: at most two (training, then validation)");
            o.text[o.ntext++] = optarg;
            break;
        case O_TOKENS:
            if (!strcmp(optarg, "chars")) o.text_tokens = ST_TEXT_CHARS;
            else if (!strcmp(optarg, "bytes")) o.text_tokens = ST_TEXT_BYTES;
            else bad("--tokens '%s': use chars or bytes", optarg);
            break;
        case O_IMGDIR: o.image_folder = optarg; break;
        case O_DATAMEM: o.data_memory_gb = number("--data-memory", optarg, 1e-9f, 1e6f); break;
        case O_DATAWORK: o.data_workers = (int)whole("--data-workers", optarg, 0, 256); break;
        case O_IMGSIZE: o.image_size = (int)whole("--image-size", optarg, 1, 16384); break;
        case O_NPYI: o.npy_images = optarg; break;
        case O_NPYL: o.npy_labels = optarg; break;
        case O_NPYTI: o.npy_test_images = optarg; break;
        case O_NPYTL: o.npy_test_labels = optarg; break;
        case O_VALFRAC: o.val_fraction = number("--val-fraction", optarg, 0, 0.9f); break;
        case O_TOKBIN: o.tokens_bin = optarg; break;
        case O_VALBIN: o.val_bin = optarg; break;
        case O_VOCAB: o.vocab = whole("--vocab", optarg, 1, 65536); break;
        case O_EVALWIN: o.eval_windows = whole("--eval-windows", optarg, 0, ONE_BILLION); break;
        case O_EPOCHS: o.epochs = (int)whole("--epochs", optarg, 1, 1000000); break;
        case O_MAXSTEPS: o.max_steps = whole("--max-steps", optarg, 1, LONG_MAX); break;
        case O_BATCH: o.batch = (int)whole("--batch-size", optarg, 1, 1 << 20); break;
        case O_OPT:
            if (!strcmp(optarg, "sgd")) o.optim.kind = ST_OPTIM_SGD;
            else if (!strcmp(optarg, "adamw")) o.optim.kind = ST_OPTIM_ADAMW;
            else bad("--optimizer '%s': use sgd or adamw", optarg);
            break;
        case O_LR: o.schedule.lr = number("--lr", optarg, 0, 100); break;
        case O_MOM: o.optim.momentum = number("--momentum", optarg, 0, 0.999f); momentum_set = true; break;
        case O_NEST: o.optim.nesterov = true; break;
        case O_BETA2: o.optim.beta2 = number("--beta2", optarg, 0, 0.99999f); break;
        case O_WD: o.optim.weight_decay = number("--weight-decay", optarg, 0, 1); break;
        case O_CLIP: o.clip_norm = number("--clip-norm", optarg, 0, 1e6f); break;
        case O_SCALE: o.scale_lr = true; break;
        case O_SCHED:
            if (!strcmp(optarg, "constant")) o.schedule.kind = ST_SCHED_CONSTANT;
            else if (!strcmp(optarg, "step")) o.schedule.kind = ST_SCHED_STEP;
            else if (!strcmp(optarg, "cosine")) o.schedule.kind = ST_SCHED_COSINE;
            else bad("--schedule '%s': use constant, step or cosine", optarg);
            break;
        case O_WARM: o.schedule.warmup = (uint64_t)whole("--warmup", optarg, 0, LONG_MAX); break;
        case O_STEPSZ: o.schedule.step_size = (uint64_t)whole("--step-size", optarg, 1, LONG_MAX); break;
        case O_GAMMA: o.schedule.gamma = number("--gamma", optarg, 0, 1); break;
        case O_MINLR: o.schedule.min_lr = number("--min-lr", optarg, 0, 100); break;
        case O_SEED: o.seed = (uint64_t)whole("--seed", optarg, 0, LONG_MAX); break;
        case O_SUMMARY: summary = true; break;
        case O_INIT: o.init_from = optarg; break;
        case O_TLOSS: o.target_loss = number("--target-loss", optarg, 0, 1e6f); break;
        case O_TARGET: o.target_accuracy = number("--target-accuracy", optarg, 0, 1); break;
        case O_NOFLUSH: o.flush_denormals = false; break;
        case O_EVAL: o.eval_every = whole("--eval-every", optarg, 0, LONG_MAX); break;
        case O_LOG: o.log_every = whole("--log-every", optarg, 1, LONG_MAX); break;
        case O_METRICS: o.metrics = optarg; break;
        case O_QUIET: o.quiet = true; break;
        case O_CKPT: o.checkpoint = optarg; break;
        case O_CKPTE: o.checkpoint_every = whole("--checkpoint-every", optarg, 0, LONG_MAX); break;
        case O_RESUME:
            /* "--resume FILE" as users type it (getopt takes only --resume=FILE):
             * shmtrain has no operands, so a following word is the file. */
            if (!optarg && optind < argc && argv[optind][0] != '-')
                optarg = argv[optind++];
            o.resume = optarg ? optarg : "";  /* "" = the --checkpoint file */
            break;
        case O_CHECK: o.check_replicas = whole("--check-replicas", optarg, 1, LONG_MAX); break;
        case O_BUCKET: o.bucket_mb = number("--bucket-mb", optarg, 0, 1024); break;
        case O_ACCUM: o.grad_accum = (int)whole("--grad-accum", optarg, 1, 4096); break;
        case O_ARDTYPE: o.allreduce_dtype = dtype_flag("--allreduce-dtype", optarg); break;
        case O_PRECISION:
            o.precision = dtype_flag("--precision", optarg);
            if (st_nn_precision_check(o.precision, ST_BACKEND_ONEDNN, &o.tuning) != ST_OK)
                bad("--%s", st_last_error());
            break;
        case 'h': usage(stdout); return 0;
        case ':': bad("%s needs a value", argv[optind - 1]);
        default: bad("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        bad("unexpected argument '%s'", argv[optind]);
    if (summary)
        return print_summary(&o);
    if (o.resume && !*o.resume)
        o.resume = o.checkpoint;
    if (o.optim.kind == ST_OPTIM_ADAMW && !momentum_set)
        o.optim.momentum = 0;
    if (o.optim.nesterov && o.optim.momentum <= 0)
        bad("--nesterov needs --momentum > 0");
    if (o.tokens_bin && o.ntext)
        bad("--tokens-bin and --text: give the language model one of them");
    if ((o.val_bin || o.vocab) && !o.tokens_bin)
        bad("%s belongs to --tokens-bin FILE", o.val_bin ? "--val-bin" : "--vocab");
    if (!o.npy_images != !o.npy_labels)
        bad("--npy-images and --npy-labels come together");
    if (!o.npy_test_images != !o.npy_test_labels)
        bad("--npy-test-images and --npy-test-labels come together");
    if (!!o.image_folder + !!o.npy_images + !!o.cifar_dir + !!(o.train_images || o.test_images) > 1)
        bad("give one image source: --image-folder, --npy-images, --cifar or the IDX files");
    if ((o.image_size || o.data_memory_gb > 0) && !o.image_folder)
        bad("%s belongs to --image-folder ROOT", o.image_size ? "--image-size" : "--data-memory");
    if (o.npy_test_images && !o.npy_images)
        bad("--npy-test-images: give the training arrays too (--npy-images, --npy-labels)");
    take_signals_in_a_thread();
    st_train_result r;
    st_status st = st_train_run(&o, &r);
    if (st == ST_ERR_INTERRUPTED)
        return 130;
    if (st != ST_OK) {
        fprintf(stderr, "shmtrain: %s\n", st_last_error());
        /* Tell the launcher whether this rank failed or stopped for a peer,
         * so it names the right root cause. */
        return st == ST_ERR_PEER_DEAD || st == ST_ERR_TIMEOUT ? ST_EXIT_PEER_FAILED : 1;
    }
    return 0;
}
