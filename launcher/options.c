/* shmrun's flags (options.h): one reader per group of the help, then the
 * checks of flags that only mean something together. */
#define _GNU_SOURCE
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpirun_cmd.h"
#include "shmtrain/coll.h"
#include "shmtrain/env.h"
#include "shmtrain/flags.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: shmrun [options] -- program [args...]\n"
"\n"
"Plan instances on disjoint core sets of this machine, bind each to its cores and\n"
"NUMA memory, start them with their rank environment, and stop them all if one fails.\n"
"\n"
"partitioning:\n"
"  -n, --ninstances N            instances (default: one per NUMA node)\n"
"  -c, --ncores-per-instance K   physical cores per instance (default: derived)\n"
"      --cores-list LIST         only these CPUs (OS ids, as taskset -c: 0-3,8)\n"
"      --nodes-list LIST         only cores of these NUMA nodes (0-1)\n"
"      --use-logical-cores       give instances their cores' hyperthreads too\n"
"      --no-cross-numa           fail instead of warning when an instance must span\n"
"                                NUMA nodes\n"
"      --oversubscribe           allow more instances than cores (they share cores)\n"
"      --bind core|numa|none     CPU binding granularity (default core)\n"
"topology (default: this machine, limited to the CPUs this process may use):\n"
"      --topology-xml FILE       an XML export of lstopo (lstopo machine.xml)\n"
"      --synthetic DESC          e.g. \"pack:2 numa:2 core:16 pu:2\"\n"
"      --allowed-cpus LIST       pretend only these CPUs are allowed (cgroup)\n"
"      --dry-run                 print the plan and exit\n"
"      --json                    with --dry-run: print the plan as JSON\n"
"      --hosts H1,H2,...         with --print-mpirun: nodes of this machine's shape\n"
"      --print-mpirun            print the mpirun command and rankfile that reproduce\n"
"                                the plan on every node of --hosts, and exit\n"
"running:\n"
"      --job-id ID               job id (default: time and pid); names shm segments\n"
"      --log-dir DIR             logs go to DIR/JOB_ID/ (default ./shmrun-logs)\n"
"      --tee-all                 show every rank's output, prefixed [rN] (default: rank 0)\n"
"      --quiet                   show no instance output (logs still written)\n"
"      --max-restarts K          restart the whole gang up to K times after a failure\n"
"      --grace SECONDS           SIGTERM to SIGKILL grace when stopping (default 10)\n"
"      --stall-timeout SECONDS   stop the gang when a rank is stopped or makes no\n"
"                                progress this long (default 60; 0 = never)\n""      --report FILE             write one JSON object: each instance's PUs, exit status,\n"
"                                peak resident memory and CPU seconds\n"
"comparing partitionings (docs/partitioning.md):\n"
"      --sweep LIST              run the job once per setting (NxC, all, numa, l3, core);\n"
"                                shmtrain's of several instances also each alone, exchanging\n"
"                                nothing: the machine's ceiling\n"
"      --repeats R               runs per setting, interleaved (default 3)\n"
"      --sweep-out DIR           where the report goes (default shmrun-sweep/DATE-TIME)\n"
"      --target-accuracy A | --target-loss L   report the time to reach it\n"
"      --compare-torch[=SCRIPT]  also run PyTorch DDP under the same plans\n"
"      --torch-mode MODE         how PyTorch runs its model there: eager (default),\n"
"                                channels_last or compile (torch.compile)\n"
"      --sweep-precisions LIST   each setting once per precision (fp32,bf16), side by side\n"
"      --sweep-global-batch G    every setting trains G samples a step (the job's gradient\n"
"                                accumulation: G / N / its batch), so settings differ in speed only\n"
"      --compare-backends shm,gloo   a PyTorch script (a job that is not shmtrain): each setting\n"
"                                over shm and over gloo (default: shm; the script's own backend\n"
"                                is replaced, SHMTRAIN_TORCH_BACKEND)\n"
"  -h, --help                    this text;  --version  the version\n"
"\n"
"Each instance gets " ST_ENV_RANK ", " ST_ENV_WORLD_SIZE ", " ST_ENV_LOCAL_RANK ",\n"
ST_ENV_LOCAL_WORLD_SIZE ", " ST_ENV_JOB_ID ", " ST_ENV_CORES ", " ST_ENV_NUMA_NODES ",\n"
ST_ENV_RESTART_COUNT ", " ST_ENV_MAX_RESTARTS ", " ST_ENV_LOG_DIR ", " ST_ENV_CONSOLE_TTY ",\n"
ST_ENV_LAUNCHER_PID " and " ST_ENV_HEARTBEAT_FILE " (include/shmtrain/env.h), and, unless already\n"
"set, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, OMP_NUM_THREADS (its cores),\n"
"OMP_PLACES=cores and OMP_PROC_BIND=close.\n");
}

static void bad_flag(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bad_flag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shmrun: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see shmrun --help)\n");
    va_end(ap);
    exit(2);
}

static int whole_number(const char *flag, const char *v, int min)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x > 1000000)
        bad_flag("%s '%s': not a whole number", flag, v);
    if (x < min)
        bad_flag("%s %ld: must be at least %d", flag, x, min);
    return (int)x;
}

static double seconds(const char *flag, const char *v, double max)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0) || x > max)
        bad_flag("%s '%s': not a number of seconds (0-%.0f)", flag, v, max);
    return x;
}

/* The names torchrun and mpirun give the same knobs. */
static const st_flag_alias foreign_names[] = {
    {"nproc-per-node", "-n"}, {"np", "-n"}, {"nnodes", "--hosts with --print-mpirun"},
    {"map-by", "--bind, -c"}, {"bind-to", "--bind"}, {"cpu-set", "--cores-list"}, {"cpuset", "--cores-list"},
    {"output-filename", "--log-dir"}, {"logs-dir", "--log-dir"}, {"tee", "--tee-all"},
    {"report-bindings", "--dry-run"}, {"rankfile", "--print-mpirun"}, {"hostfile", "--hosts"},
    {"max-restart", "--max-restarts"}, {NULL, NULL}};

/* Every word before the command spelled in full (a prefix is refused: a
 * later option could change what it means), with a suggestion when not. */
static void check_spelling(int argc, char **argv, const struct option *longopts)
{
    for (int i = 1; i < argc && argv[i][0] == '-'; i++)
        if (!strcmp(argv[i], "-np"))  /* getopt would read it as -n with the value "p" */
            bad_flag("unknown option '-np' (mpirun's; shmrun's is -n N)");
    char why[512];
    if (st_flags_check(argc, argv, "n:c:h", longopts, foreign_names, true, why, sizeof why))
        bad_flag("%s", why);
}

enum {
    O_CORES = 256, O_NODES, O_LOGICAL, O_NOCROSS, O_BIND, O_XML, O_SYNTH, O_ALLOWED, O_DRY, O_JSON, O_JOB, O_LOGDIR,
    O_TEE, O_QUIET, O_RESTARTS, O_GRACE, O_VERSION, O_REPORT, O_SWEEP, O_REPEATS, O_PRECISIONS, O_GLOBAL_BATCH,
    O_SWEEPOUT, O_TARGET, O_TARGET_LOSS, O_TORCH, O_TORCH_MODE, O_BACKENDS, O_OVERSUB, O_STALL, O_HOSTS, O_PRINT_MPIRUN
};

static const struct option longopts[] = {
    {"ninstances", required_argument, 0, 'n'}, {"ncores-per-instance", required_argument, 0, 'c'},
    {"cores-list", required_argument, 0, O_CORES}, {"nodes-list", required_argument, 0, O_NODES},
    {"use-logical-cores", no_argument, 0, O_LOGICAL}, {"no-cross-numa", no_argument, 0, O_NOCROSS},
    {"bind", required_argument, 0, O_BIND}, {"topology-xml", required_argument, 0, O_XML},
    {"synthetic", required_argument, 0, O_SYNTH}, {"allowed-cpus", required_argument, 0, O_ALLOWED},
    {"dry-run", no_argument, 0, O_DRY}, {"json", no_argument, 0, O_JSON},
    {"job-id", required_argument, 0, O_JOB}, {"log-dir", required_argument, 0, O_LOGDIR},
    {"tee-all", no_argument, 0, O_TEE}, {"quiet", no_argument, 0, O_QUIET},
    {"max-restarts", required_argument, 0, O_RESTARTS}, {"grace", required_argument, 0, O_GRACE},
    {"report", required_argument, 0, O_REPORT}, {"sweep", required_argument, 0, O_SWEEP},
    {"repeats", required_argument, 0, O_REPEATS}, {"sweep-precisions", required_argument, 0, O_PRECISIONS},
    {"sweep-global-batch", required_argument, 0, O_GLOBAL_BATCH}, {"sweep-out", required_argument, 0, O_SWEEPOUT},
    {"target-accuracy", required_argument, 0, O_TARGET}, {"target-loss", required_argument, 0, O_TARGET_LOSS},
    {"compare-torch", optional_argument, 0, O_TORCH}, {"torch-mode", required_argument, 0, O_TORCH_MODE},
    {"compare-backends", required_argument, 0, O_BACKENDS},
    {"oversubscribe", no_argument, 0, O_OVERSUB}, {"stall-timeout", required_argument, 0, O_STALL},
    {"hosts", required_argument, 0, O_HOSTS}, {"print-mpirun", no_argument, 0, O_PRINT_MPIRUN},
    {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, O_VERSION}, {0, 0, 0, 0}};

/* One reader per group of the help; each says whether the flag was its. */
static bool partitioning_flag(int c, char *v, struct shmrun_options *o)
{
    switch (c) {
    case 'n': o->req.ninstances = whole_number("--ninstances", v, 1); break;
    case 'c': o->req.cores_per_instance = whole_number("--ncores-per-instance", v, 1); break;
    case O_CORES: o->req.cpu_list = v; break;
    case O_NODES: o->req.node_list = v; break;
    case O_LOGICAL: o->req.use_logical_cores = true; break;
    case O_NOCROSS: o->req.refuse_cross_numa = true; break;
    case O_OVERSUB: o->req.oversubscribe = true; break;
    case O_BIND:
        if (!strcmp(v, "core")) o->req.bind = ST_BIND_CORE;
        else if (!strcmp(v, "numa")) o->req.bind = ST_BIND_NUMA;
        else if (!strcmp(v, "none")) o->req.bind = ST_BIND_NONE;
        else bad_flag("--bind '%s': use core, numa or none", v);
        o->bind_arg = v;
        break;
    default: return false;
    }
    return true;
}

static bool topology_flag(int c, char *v, struct shmrun_options *o)
{
    switch (c) {
    case O_XML: o->topo_kind = ST_TOPO_XML; o->topo_arg = v; break;
    case O_SYNTH: o->topo_kind = ST_TOPO_SYNTHETIC; o->topo_arg = v; break;
    case O_ALLOWED: o->req.allowed_cpus = v; break;
    case O_DRY: o->dry_run = true; break;
    case O_JSON: o->json = true; break;
    case O_PRINT_MPIRUN: o->print_mpirun = true; break;
    case O_HOSTS:
        if (!mpirun_hosts_count(v))
            bad_flag("--hosts '%s': not a list of host names like node1,node2", v);
        o->hosts = v;
        break;
    default: return false;
    }
    return true;
}

static bool running_flag(int c, char *v, struct shmrun_options *o)
{
    switch (c) {
    case O_JOB:
        if (st_segment_name((char[160]){0}, 160, v, 0) != ST_OK)
            bad_flag("--job-id '%s': use 1-64 of [A-Za-z0-9_.-]", v);
        o->job_id = v;
        break;
    case O_LOGDIR: o->log_dir = v; break;
    case O_TEE: o->tee_all = true; break;
    case O_QUIET: o->quiet = true; break;
    case O_RESTARTS: o->max_restarts = whole_number("--max-restarts", v, 0); break;
    case O_GRACE: o->grace_s = seconds("--grace", v, 3600), o->grace_arg = v; break;
    case O_STALL: o->stall_timeout_s = seconds("--stall-timeout", v, 86400), o->stall_arg = v; break;
    case O_REPORT: o->report = v; break;
    default: return false;
    }
    return true;
}

/* --target-accuracy A or --target-loss L: one of them, a positive number. */
static void target_flag(bool loss, const char *v, struct shmrun_options *o)
{
    char *end;
    if (o->sweep.target.value > 0 && o->sweep.target.loss != loss)
        bad_flag("--target-accuracy and --target-loss: give one (accuracy for classifiers, loss for "
                 "language models)");
    o->sweep.target = (struct sweep_target){.loss = loss, .value = strtod(v, &end)};
    if (*end || end == v || !(o->sweep.target.value > 0))
        bad_flag("--target-%s '%s': not a positive number", loss ? "loss" : "accuracy", v);
    if (!loss && o->sweep.target.value > 1)
        bad_flag("--target-accuracy '%s': not a fraction in (0, 1]", v);
}

/* --torch-mode: the ways a PyTorch user makes a CPU model faster, which the
 * project's peer scripts take as --mode. */
static const char *torch_mode(const char *v)
{
    static const char *const modes[] = {"eager", "channels_last", "compile"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (!strcmp(v, modes[i]))
            return modes[i];
    bad_flag("--torch-mode '%s': use eager, channels_last or compile", v);
}

static bool sweep_flag(int c, char *v, struct shmrun_options *o)
{
    switch (c) {
    case O_SWEEP: o->sweep.spec = v; o->sweeping = true; break;
    case O_REPEATS: o->sweep.repeats = whole_number("--repeats", v, 1); break;
    case O_PRECISIONS: o->sweep.precisions = v; break;
    case O_GLOBAL_BATCH: o->sweep.global_batch = whole_number("--sweep-global-batch", v, 1); break;
    case O_SWEEPOUT: o->sweep.out_dir = v; break;
    case O_TARGET: target_flag(false, v, o); break;
    case O_TARGET_LOSS: target_flag(true, v, o); break;
    case O_TORCH: o->sweep.compare_torch = true; o->sweep.torch_script = v; break;
    case O_TORCH_MODE: o->sweep.torch_mode = torch_mode(v); break;
    case O_BACKENDS:
        if (strcmp(v, "shm") && strcmp(v, "shm,gloo") && strcmp(v, "gloo,shm"))
            bad_flag("--compare-backends '%s': shm, or shm,gloo", v);
        o->sweep.compare_gloo = strcmp(v, "shm") != 0;
        break;
    default: return false;
    }
    return true;
}

/* Flags that only mean something together. */
static void check_combinations(struct shmrun_options *o)
{
    if (o->print_mpirun && !o->hosts)
        bad_flag("--print-mpirun needs --hosts: the nodes to run on (node1,node2,...)");
    if (o->hosts && !o->print_mpirun)
        bad_flag("--hosts goes with --print-mpirun (shmrun itself runs on this machine)");
    if (o->print_mpirun && (o->sweeping || o->json))
        bad_flag("--print-mpirun does not go with --sweep or --json");
    if (o->print_mpirun)
        o->dry_run = true;  /* it prints; it runs nothing */
    if (o->json && !o->dry_run)
        bad_flag("--json goes with --dry-run");
    if (o->sweeping && !o->argv && !o->dry_run)
        bad_flag("--sweep needs the job to run: shmrun --sweep 1x2,2x1 -- shmtrain [args...]");
    if (!o->argv && !o->dry_run)
        bad_flag("no program given: shmrun [options] -- program [args...]");
    if (o->topo_kind != ST_TOPO_MACHINE && !o->dry_run)
        bad_flag("--topology-xml/--synthetic describe another machine: add --dry-run");
    if (!o->sweeping && (o->sweep.out_dir || o->sweep.target.value > 0 || o->sweep.compare_torch ||
                         o->sweep.repeats != 3 || o->sweep.precisions || o->sweep.global_batch))
        bad_flag("--repeats, --sweep-out, --target-accuracy, --target-loss, --compare-torch, --sweep-precisions "
                 "and --sweep-global-batch go with --sweep");
    if (o->sweep.torch_mode && !o->sweep.compare_torch)
        bad_flag("--torch-mode goes with --compare-torch");
    if (o->sweep.compare_gloo && !o->sweeping)
        bad_flag("--compare-backends goes with --sweep");
    if (o->sweeping && (o->req.ninstances || o->req.cores_per_instance))
        bad_flag("--sweep names the settings itself: drop -n/-c");
    if (o->sweeping && (o->json || o->report || o->max_restarts || o->job_id || o->tee_all))
        bad_flag("--json, --report, --max-restarts, --job-id and --tee-all do not go with --sweep");
}

struct shmrun_options shmrun_options_parse(int argc, char **argv)
{
    struct shmrun_options o = {.log_dir = "shmrun-logs", .grace_s = 10, .stall_timeout_s = 60, .sweep = {.repeats = 3}};
    check_spelling(argc, argv, longopts);
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+:n:c:h", longopts, NULL)) != -1) {
        if (partitioning_flag(c, optarg, &o) || topology_flag(c, optarg, &o) || running_flag(c, optarg, &o) ||
            sweep_flag(c, optarg, &o))
            continue;
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (c == O_VERSION) {
            printf("shmrun %s\n", SHMRUN_VERSION);
            exit(0);
        }
        if (c == ':')
            bad_flag("%s needs a value", argv[optind - 1]);
        if (optopt)
            bad_flag("unknown option '-%c'", optopt);
        bad_flag("unknown option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        o.argv = argv + optind;
    check_combinations(&o);
    return o;
}

