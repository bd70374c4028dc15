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
#include <sys/stat.h>

#include "shmtrain/env.h"
#include "shmtrain/nn.h"
#include "shmtrain/text.h"
#include "shmtrain/lifeline.h"
#include "shmtrain/train.h"
#include "shmtrain_line.h"
#include "shmtrain_options.h"

/* --summary: the model's layers, shapes and parameters; with --precision
 * bf16, what each layer computes in and keeps, from the net's plan alone
 * (gpt2's whole net at its recipe's batch took 24 GB to print this);
 * =kernels: then the whole net built, each layer's kernels. */
static int print_summary(const st_train_options *o, bool kernels)
{
    st_model *m = NULL;
    st_net *n = NULL;
    if (st_train_model_load(&m, o->model) != ST_OK)
        goto fail;
    st_model_summary(m, stdout);
    if (o->precision != ST_DTYPE_F32) {
        const st_net_config nc = {.batch = o->batch, .precision = o->precision, .tuning = o->tuning,
                                  .plan_only = true};
        if (st_net_create(&n, m, &nc) != ST_OK)
            goto fail;
        printf("\n");
        st_net_describe_precision(n, stdout);
        st_net_destroy(n);
    }
    if (kernels) {
        printf("\n");
        if (st_train_describe_kernels(m, o, stdout) != ST_OK)
            goto fail;
    }
    st_model_destroy(m);
    return 0;
fail:
    fprintf(stderr, "shmtrain: %s\n", st_last_error());
    st_model_destroy(m);
    return 1;
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

/* A config.txt repeated with another instance count trains another global
 * batch: said, not refused (it may be meant). */
static void warn_of_another_instance_count(const struct run_dir *rd)
{
    const int then = shmtrain_config_instances();
    if (rd->rank0 && then > 0 && then != rd->instances)
        fprintf(stderr, "shmtrain: warning: --config: its run had %d instance%s, this one has %d: the global batch "
                "differs (shmrun -n %d repeats it)\n", then, then == 1 ? "" : "s", rd->instances, then);
}

/* A run's folder where a checkpoint is asked for (sample, export): its
 * shmtrain.ckpt, said. */
static const char *checkpoint_in(const char *flag_value, char *buf, size_t len)
{
    struct stat sb;
    if (!flag_value || stat(flag_value, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return flag_value;
    snprintf(buf, len, "%s/shmtrain.ckpt", flag_value);
    return buf;
}

static void sample_usage(FILE *f)
{
    fprintf(f,
"usage: shmtrain sample --checkpoint FILE|RUN_FOLDER --prompt TEXT [options]\n"
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
    shmtrain_check_spelling(argc, argv, opts, "sample: ");
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case S_CKPT: o.checkpoint = optarg; break;
        case S_PROMPT: o.prompt = optarg; break;
        case S_TOKENS: o.tokens = (int)shmtrain_whole("--tokens", optarg, 0, 1000000); break;
        case S_TEMP: o.temperature = shmtrain_number("--temperature", optarg, 0, 100); break;
        case S_TOPK: o.top_k = (int)shmtrain_whole("--top-k", optarg, 0, 1000000); break;
        case S_SEED: o.seed = (uint64_t)shmtrain_whole("--seed", optarg, 0, LONG_MAX); break;
        case 'h': sample_usage(stdout); return 0;
        case ':': shmtrain_bad("%s needs a value", argv[optind - 1]);
        default: shmtrain_bad("sample: unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        shmtrain_bad("sample: unexpected argument '%s'", argv[optind]);
    if (!o.checkpoint)
        shmtrain_bad("sample: --checkpoint FILE is required");
    char in_folder[8192];
    o.checkpoint = checkpoint_in(o.checkpoint, in_folder, sizeof in_folder);
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
    shmtrain_check_spelling(argc, argv, opts, "export: ");
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case E_CKPT: checkpoint = optarg; break;
        case E_OUT: out = optarg; break;
        case 'h':
            printf("usage: shmtrain export --checkpoint FILE|RUN_FOLDER --out MODEL.safetensors\n"
                   "  the parameters (and batch-norm statistics) in the safetensors format, named as PyTorch\n"
                   "  names them (nanoGPT's GPT keys for the GPT presets); scripts/load_export.py reads it\n");
            return 0;
        case ':': shmtrain_bad("%s needs a value", argv[optind - 1]);
        default: shmtrain_bad("export: unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        shmtrain_bad("export: unexpected argument '%s'", argv[optind]);
    if (!checkpoint || !out)
        shmtrain_bad("export: --checkpoint FILE and --out FILE are required");
    char in_folder[8192];
    checkpoint = checkpoint_in(checkpoint, in_folder, sizeof in_folder);
    if (st_export_safetensors(checkpoint, out) != ST_OK) {
        fprintf(stderr, "shmtrain export: %s\n", st_last_error());
        return 1;
    }
    struct stat written;
    if (stat(out, &written) == 0)  /* success says what it wrote, as the trainer does */
        printf("shmtrain export: wrote %s (%.1f MB, safetensors) from %s\n", out, (double)written.st_size / 1e6,
               checkpoint);
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
           st_nn_native(ST_DTYPE_BF16, NULL) ? "native" : "not native here");
    return 0;
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
    st_train_options o;
    st_train_defaults(&o);
    st_nn_tuning_from_env(&o.tuning);  /* the engine's switches: main() reads them, the library does not */
    struct run_dir_request rq = {0};
    switch (shmtrain_parse(argc, argv, &o, &rq)) {
    case ACTION_HELP: shmtrain_usage(stdout); return 0;
    case ACTION_VERSION: return print_version();
    case ACTION_SUMMARY: return print_summary(&o, false);
    case ACTION_SUMMARY_KERNELS: return print_summary(&o, true);
    case ACTION_TRAIN: break;
    }
    static struct run_dir rd;
    char why[8192];
    if (run_dir_prepare(&rq, &o, &rd, why, sizeof why) != 0)
        shmtrain_bad("%s", why);
    warn_of_another_instance_count(&rd);
    o.on_start = run_dir_begin;
    o.on_start_ctx = &rd;
    o.resume_hint = rd.used ? rd.path : NULL;
    take_signals_in_a_thread();
    st_train_result r;
    st_status st = st_train_run(&o, &r);
    if (st != ST_OK && st != ST_ERR_INTERRUPTED)
        fprintf(stderr, "shmtrain: %s\n", st_last_error());  /* before console.log closes: it keeps the line */
    run_dir_end(&rd);
    free((char *)rq.config_text);
    if (st == ST_ERR_INTERRUPTED)
        return 130;
    if (st != ST_OK) {
        /* Tell the launcher whether this rank failed or stopped for a peer,
         * so it names the right root cause. */
        return st == ST_ERR_PEER_DEAD || st == ST_ERR_TIMEOUT ? ST_EXIT_PEER_FAILED : 1;
    }
    return 0;
}
