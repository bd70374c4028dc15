/* sweep_run: plan the settings, run them interleaved as child shmruns,
 * collect, report.  See sweep_run.h. */
#define _GNU_SOURCE
#include "sweep_run.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sweep.h"
#include "sweep_output.h"
#include "sweep_peer.h"
#include "shmtrain/cpuprobe.h"
#include "shmtrain/env.h"


static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) { interrupted = sig; }

/* ------------------------------------------------------------ helpers -- */

static char *slurp_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t n; buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (len + 1 == cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
            }
            buf = bigger;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static int make_dir(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static bool has_flag(char **argv, const char *flag)
{
    size_t n = strlen(flag);
    for (char **a = argv; a && *a; a++)
        if (!strncmp(*a, flag, n) && ((*a)[n] == '\0' || (*a)[n] == '='))
            return true;
    return false;
}

/* The program's `--flag N` or `--flag=N` (the last one given), or 0. */
static long flag_number(char **argv, const char *flag)
{
    const size_t n = strlen(flag);
    long v = 0;
    for (char **a = argv; a && *a; a++) {
        const char *text = NULL;
        if (!strcmp(*a, flag) && a[1])
            text = a[1];
        else if (!strncmp(*a, flag, n) && (*a)[n] == '=')
            text = *a + n + 1;
        char *end;
        if (text) {
            const long x = strtol(text, &end, 10);
            v = *end || end == text ? 0 : x;
        }
    }
    return v;
}

/* The job's per-instance batch: --batch-size (shmtrain, the peers),
 * nanoGPT's --batch_size or Hugging Face's TrainingArguments'
 * --per_device_train_batch_size; 0 when it gives none. */
static long micro_batch(char **argv)
{
    static const char *names[] = {"--batch-size", "--batch_size", "--per_device_train_batch_size"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const long b = flag_number(argv, names[i]);
        if (b > 0)
            return b;
    }
    return 0;
}

/* ------------------------------------------------------------ planning -- */

/* The job's partitioning flags with this shape; NULL after a one-line
 * message naming the setting when it cannot be planned (quiet: no message). */
static st_plan *plan_for(const st_topo *t, const struct sweep_job *j, int ninstances, int cores,
                         const char *setting, bool quiet)
{
    st_plan_request req = j->req;
    req.ninstances = ninstances;
    req.cores_per_instance = cores;
    st_plan *p = NULL;
    if (st_plan_create(&p, t, &req) != ST_OK) {
        if (!quiet)
            fprintf(stderr, "shmrun: --sweep setting '%s': %s\n", setting, st_last_error());
        return NULL;
    }
    return p;
}

/* The arithmetic the 1 x all plan's CPUs give at once against one of them
 * (cpuprobe.h): a VM or a CPU quota that gives fewer cores than hwloc shows
 * bounds every setting of the sweep.  About 1.2 s. */
static void probe_machine(const st_topo *t, const struct sweep_job *j, struct sweep_report *rep)
{
    st_plan *p = plan_for(t, j, 1, 0, "all", true);
    if (!p)
        return;
    const st_plan_instance *in = &p->inst[0];
    if (st_cpu_probe_ratio(in->pus, in->npus, 0.2, 3, &rep->probe_one_gflops, &rep->probe_all_gflops) == ST_OK)
        rep->probe_cpus = in->npus;
    else
        fprintf(stderr, "shmrun: --sweep: the CPU probe failed (%s); the report goes without it\n", st_last_error());
    st_plan_destroy(p);
}

static int plan_settings(const st_topo *t, const struct sweep_job *j, struct sweep_setting *s, int *ns,
                         int *all_cores)
{
    st_topo_info info;
    st_topo_get_info(t, &info);
    char err[300];
    int n = sweep_parse_spec(j->spec, info.l3_caches, s, SWEEP_MAX_SETTINGS - 1, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "shmrun: %s\n", err);
        return -1;
    }
    /* A setting this machine cannot plan (8x8 on a 16-core box) is left out
     * with a line saying why, not the whole sweep: a list copied from the
     * docs still compares what fits.  None fitting is the error. */
    int kept = 0, fitting = 0;
    for (int i = 0; i < n; i++) {
        st_plan *p = plan_for(t, j, s[i].req_instances, s[i].req_cores, s[i].asked, true);
        fitting += p != NULL;
        st_plan_destroy(p);
    }
    if (!fitting && n > 0)  /* the first one's reason, as the error */
        return plan_for(t, j, s[0].req_instances, s[0].req_cores, s[0].asked, false) ? 0 : -1;
    for (int i = 0; i < n; i++) {
        st_plan *p = plan_for(t, j, s[i].req_instances, s[i].req_cores, s[i].asked, true);
        if (!p) {
            fprintf(stderr, "shmrun: --sweep setting '%s' left out: %s\n", s[i].asked, st_last_error());
            continue;
        }
        s[kept] = s[i];
        s[kept].instances = p->ninstances;
        s[kept++].cores = p->inst[0].ncores;
        st_plan_destroy(p);
    }
    n = kept;
    st_plan *all = plan_for(t, j, 1, 0, "all", true);  /* no baseline when it cannot be planned */
    *all_cores = all ? all->inst[0].ncores : 0;
    st_plan_destroy(all);
    *ns = sweep_finalize(s, n, SWEEP_MAX_SETTINGS, *all_cores);
    if (j->precisions && (*ns = sweep_expand_precisions(s, *ns, SWEEP_MAX_SETTINGS, j->precisions, err,
                                                        sizeof err)) < 0) {
        fprintf(stderr, "shmrun: %s\n", err);
        return -1;
    }
    if (j->global_batch && sweep_hold_global_batch(s, *ns, j->global_batch, micro_batch(j->argv), err,
                                                   sizeof err) < 0) {
        fprintf(stderr, "shmrun: %s\n", err);
        return -1;
    }
    return 0;
}

/* The systems a sweep runs: the job's and its peers' (the first nsystems of
 * sweep.h's), then its independent instances (shmtrain's --balance
 * independent; a script's over shm with SHMTRAIN_INDEPENDENT), which a
 * setting of one instance does not need (it exchanges nothing anyway). */
static int systems_of(int npeer_systems, int *systems)
{
    int n = 0;
    for (; n < npeer_systems; n++)
        systems[n] = n;
    systems[n++] = SWEEP_INDEPENDENT;
    return n;
}

/* shmtrain itself, synchronized or alone (not a PyTorch peer). */
static bool ours(int system) { return system == SWEEP_SHMTRAIN || system == SWEEP_INDEPENDENT; }

/* sweep_order's slots over these systems, without the runs not needed. */
static int order_slots(const struct sweep_job *j, const struct sweep_setting *s, int ns, const int *systems,
                       int nsystems, struct sweep_slot *slots)
{
    const int n = sweep_order(ns, nsystems, j->repeats, slots);
    int kept = 0;
    for (int k = 0; k < n; k++) {
        slots[k].system = systems[slots[k].system];
        if (!(slots[k].system == SWEEP_INDEPENDENT && s[slots[k].setting].instances < 2))
            slots[kept++] = slots[k];
    }
    return kept;
}

static int print_plans(const st_topo *t, const struct sweep_job *j, const struct sweep_setting *s, int ns,
                       int npeer_systems)
{
    for (int i = 0; i < ns; i++) {
        st_plan *p = plan_for(t, j, s[i].instances, s[i].cores, s[i].label, false);
        if (!p)
            return 2;
        printf("== setting %s (asked: %s)\n", s[i].label, s[i].asked);
        st_plan_write_table(p, stdout);
        printf("\n");
        st_plan_destroy(p);
    }
    struct sweep_slot slots[SWEEP_MAX_SETTINGS * SWEEP_NSYSTEMS * 64];
    int systems[SWEEP_NSYSTEMS];
    const int n = order_slots(j, s, ns, systems, systems_of(npeer_systems, systems), slots);
    printf("run order (%d runs):", n);
    for (int k = 0; k < n; k++)
        printf("%s%s/%s", k ? ", " : " ", s[slots[k].setting].label, sweep_system_name[slots[k].system]);
    printf("\n");
    return 0;
}

/* ------------------------------------------------------------- running -- */

struct run_paths { char dir[1024], job[96], report[1100], metrics[1300], checkpoint[1100], out[1100]; };

enum { CHILD_ARGS = 256, CHILD_ARGS_OWN = 40 };  /* a run's argv, and what child_argv adds to the job's */

/* The words after shmrun's "--" for a user's script: it runs as it is, its
 * backend chosen by shmtrain_torch (sweep_peer.h). Returns the next free word. */
static int script_words(const struct sweep_job *j, const struct sweep_setting *st, int system, char **out, int k,
                        char num[3][16], char accum_env[48])
{
    out[k++] = "env";
    out[k++] = system == SWEEP_TORCH ? "SHMTRAIN_TORCH_BACKEND=gloo" : "SHMTRAIN_TORCH_BACKEND=shm";
    if (system == SWEEP_INDEPENDENT)  /* the backend keeps every all-reduce local (env.h) */
        out[k++] = ST_ENV_INDEPENDENT "=1";
    if (st->grad_accum > 1) {  /* --sweep-global-batch: the script reads it (docs/partitioning.md) */
        snprintf(num[2], 16, "%d", st->grad_accum);
        snprintf(accum_env, 48, "SHMTRAIN_GRAD_ACCUM=%s", num[2]);
        out[k++] = accum_env;
    }
    for (char **a = j->argv; *a; a++)
        out[k++] = *a;
    return k;
}

/* The flags the setting and the system add to shmtrain's or a peer's own. */
static int setting_flags(const struct sweep_job *j, const struct sweep_setting *st, int system,
                         const struct run_paths *rp, char **out, int k, char num[3][16])
{
    if (st->precision[0]) {  /* --sweep-precisions: both systems take the flag */
        out[k++] = "--precision";
        out[k++] = (char *)st->precision;
    }
    if (st->grad_accum > 1) {  /* --sweep-global-batch: both systems too */
        snprintf(num[2], 16, "%d", st->grad_accum);
        out[k++] = "--grad-accum";
        out[k++] = num[2];
    }
    if (!ours(system) && j->torch_mode) {
        out[k++] = "--mode";
        out[k++] = (char *)j->torch_mode;
    }
    if (system == SWEEP_TORCH_SHM) {  /* the project's peer scripts take it (sweep_peer.h) */
        out[k++] = "--backend";
        out[k++] = "shm";
    }
    if (system == SWEEP_INDEPENDENT) {  /* the last --balance is the one that counts */
        out[k++] = "--balance";
        out[k++] = "independent";
    }
    if (ours(system) && !has_flag(j->argv, "--checkpoint")) {
        out[k++] = "--checkpoint";
        out[k++] = (char *)rp->checkpoint;
    }
    if (ours(system)) {  /* its run folder in the sweep's, not in the user's runs/ (nor runs/latest moved) */
        out[k++] = "--out";
        out[k++] = (char *)rp->out;
    }
    return k;
}

static void child_argv(const struct sweep_job *j, const struct sweep_setting *st, int system,
                       const struct sweep_peers *peers, const struct run_paths *rp, const char *self, char **out,
                       char num[3][16], char accum_env[48])
{
    int k = 0;
    snprintf(num[0], 16, "%d", st->instances);
    snprintf(num[1], 16, "%d", st->cores);
    out[k++] = (char *)self;
    out[k++] = "-n";
    out[k++] = num[0];
    out[k++] = "-c";
    out[k++] = num[1];
    for (char **f = j->child_flags; f && *f; f++)
        out[k++] = *f;
    out[k++] = "--quiet";
    out[k++] = "--log-dir";
    out[k++] = (char *)rp->dir;
    out[k++] = "--job-id";
    out[k++] = (char *)rp->job;
    out[k++] = "--report";
    out[k++] = (char *)rp->report;
    out[k++] = "--";
    if (j->script) {
        out[script_words(j, st, system, out, k, num, accum_env)] = NULL;
        return;
    }
    if (!ours(system)) {
        /* as its users run it: OpenBLAS on its own kernels (some machines
         * set these two, which hold it to older ones) */
        static char *const plain_blas[] = {"env", "-u", "OPENBLAS_CORETYPE", "-u", "OPENBLAS_L2_SIZE"};
        for (size_t i = 0; i < sizeof plain_blas / sizeof *plain_blas; i++)
            out[k++] = plain_blas[i];
        out[k++] = (char *)peers->python;
        out[k++] = (char *)peers->script;
    } else {
        out[k++] = j->argv[0];
    }
    for (char **a = j->argv + 1; *a; a++)
        out[k++] = *a;
    out[setting_flags(j, st, system, rp, out, k, num)] = NULL;
}

static int run_child(char **argv)
{
    const pid_t sweep = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* A run's shmrun dies with the sweep, its gang with it (gang.c). */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != sweep)
            _exit(126);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execv(argv[0], argv);
        fprintf(stderr, "shmrun: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
        if (interrupted)
            kill(pid, (int)interrupted);  /* the terminal may not have sent it (kill from a script) */
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void run_one(const struct sweep_job *j, const struct sweep_setting *s, const struct sweep_slot *slot,
                    int order, const struct sweep_peers *peers, const char *self, struct sweep_run *r,
                    struct sweep_versions *v)
{
    const struct sweep_setting *st = &s[slot->setting];
    struct run_paths rp;
    sweep_run_reset(r, slot->setting, slot->system, slot->repeat, order);
    snprintf(rp.dir, sizeof rp.dir, "%s/runs/%02d-%s-%s-r%d", j->out_dir, order + 1, st->label,
             j->script ? (slot->system == SWEEP_SHMTRAIN ? "script-shm" : slot->system == SWEEP_TORCH ? "script-gloo"
                                                                                           : "script-independent")
                       : sweep_system_name[slot->system], slot->repeat + 1);
    snprintf(rp.job, sizeof rp.job, "sweep%d-%d", (int)getpid(), order + 1);
    snprintf(rp.report, sizeof rp.report, "%s/report.json", rp.dir);
    snprintf(rp.metrics, sizeof rp.metrics, "%s/%s/attempt0/metrics.jsonl", rp.dir, rp.job);
    snprintf(rp.checkpoint, sizeof rp.checkpoint, "%s/checkpoint.ckpt", rp.dir);
    snprintf(rp.out, sizeof rp.out, "%s/run", rp.dir);
    if (make_dir(rp.dir) != 0) {
        snprintf(r->error, sizeof r->error, "cannot create %.120s: %.60s", rp.dir, strerror(errno));
        return;
    }
    char *argv[CHILD_ARGS], num[3][16], accum_env[48];
    child_argv(j, st, slot->system, peers, &rp, self, argv, num, accum_env);
    int rc = run_child(argv);
    char *report = slurp_file(rp.report), *metrics = slurp_file(rp.metrics);
    bool launched = sweep_read_report(report, r) == 0;
    if (launched && j->script && !metrics) {  /* a script that reports nothing: its wall time */
        r->ok = rc == 0;
        *r->error = '\0';
    } else if (launched && sweep_read_metrics(metrics, j->target, r, v) == 0) {
        r->ok = rc == 0;
    }
    if (r->ok && !ours(slot->system) && j->torch_mode && strcmp(r->mode, j->torch_mode) != 0) {
        r->ok = false;  /* a script of the user's that ignores --mode: not the peer asked for */
        snprintf(r->error, sizeof r->error, "--torch-mode %s: the peer's run record says mode '%s'", j->torch_mode,
                 r->mode);
    }
    if (!r->ok && !*r->error)
        snprintf(r->error, sizeof r->error, "exit %d", rc);
    if (!r->ok) {
        size_t len = strlen(r->error);
        snprintf(r->error + len, sizeof r->error - len, "; logs in %.*s/%s", (int)(sizeof r->error / 2), rp.dir,
                 rp.job);
    }
    free(report);
    free(metrics);
    unlink(rp.checkpoint);  /* the sweep measures; it keeps no models */
}

static void print_progress(const struct sweep_setting *s, const struct sweep_run *r, int k, int n, bool loss,
                           bool script)
{
    fprintf(stderr, "shmrun: sweep [%d/%d] %-6s %-11s repeat %d: ", k + 1, n, s[r->setting].label,
            script ? sweep_label(r->system, true) : sweep_system_name[r->system], r->repeat + 1);
    if (!r->ok) {
        fprintf(stderr, "FAILED: %s\n", r->error);
        return;
    }
    if (isnan(r->samples_per_s)) {  /* a script that reports nothing */
        fprintf(stderr, "%.1f s (no progress reported)\n", r->wall_s);
        return;
    }
    fprintf(stderr, "%.0f samples/s, step %.2f ms", r->samples_per_s, r->step_ms);
    if (!isnan(r->time_to_target_s))
        fprintf(stderr, ", target at %.1f s", r->time_to_target_s);
    if (!isnan(r->final_accuracy))  /* the loss for a language model's race, else the accuracy */
        fprintf(stderr, loss ? ", validation loss %.4f" : ", test accuracy %.2f%%",
                loss ? r->final_loss : 100 * r->final_accuracy);
    fprintf(stderr, " (%.1f s)\n", r->wall_s);
}

/* ---------------------------------------------------------------- main -- */

static int check_job(const struct sweep_job *j)
{
    static const char *refused[] = {"--metrics", "--resume", "--checkpoint-every", "--out", NULL};
    static const char *own_accumulation[] = {"--grad-accum", "--gradient_accumulation_steps", NULL};
    size_t words = 0;
    for (char **a = j->argv; a && *a; a++)
        words++;
    for (char **a = j->child_flags; a && *a; a++)
        words++;
    if (words > CHILD_ARGS - CHILD_ARGS_OWN) {  /* child_argv adds 31 words of its own, the NULL included */
        fprintf(stderr, "shmrun: --sweep: %zu arguments to pass on; at most %d\n", words, CHILD_ARGS - CHILD_ARGS_OWN);
        return -1;
    }
    if (j->precisions && has_flag(j->argv, "--precision")) {
        fprintf(stderr, "shmrun: --sweep-precisions: the program's own --precision would contradict it\n");
        return -1;
    }
    for (const char **f = own_accumulation; j->global_batch && *f; f++)
        if (has_flag(j->argv, *f)) {
            fprintf(stderr, "shmrun: --sweep-global-batch: the program's own %s would contradict it\n", *f);
            return -1;
        }
    if (j->global_batch && micro_batch(j->argv) < 1) {
        fprintf(stderr, "shmrun: --sweep-global-batch: give the program's --batch-size (the micro-batch each "
                        "instance runs; a script's --batch-size, --batch_size or --per_device_train_batch_size)\n");
        return -1;
    }
    for (const char **f = refused; *f; f++)
        if (has_flag(j->argv, *f)) {
            fprintf(stderr, "shmrun: --sweep: the program's %s is not allowed in a sweep (each run starts "
                            "fresh and the sweep collects its metrics itself)\n", *f);
            return -1;
        }
    if (j->script && (j->compare_torch || j->precisions)) {
        fprintf(stderr, "shmrun: --sweep of a script (%s): %s is shmtrain's; a script's runs compare backends "
                        "(--compare-backends shm,gloo)\n", j->argv[0], j->compare_torch ? "--compare-torch"
                                                                                       : "--sweep-precisions");
        return -1;
    }
    if (j->compare_gloo && !j->script) {
        fprintf(stderr, "shmrun: --compare-backends is for a PyTorch script; shmtrain's sweep compares with "
                        "--compare-torch\n");
        return -1;
    }
    if (j->torch_mode && !strcmp(j->torch_mode, "channels_last") && has_flag(j->argv, "--text")) {
        fprintf(stderr, "shmrun: --torch-mode channels_last: a language model (--text) has no convolutions to "
                        "lay out; use eager or compile\n");
        return -1;
    }
    if (j->repeats < 1 || j->repeats > 64) {
        fprintf(stderr, "shmrun: --repeats %d: use 1-64\n", j->repeats);
        return -1;
    }
    return 0;
}

/* The job's command as the report shows it: the program's own name, then its arguments. */
static const char *command_line(const struct sweep_job *j, char *command, size_t size)
{
    size_t clen = 0;
    command[0] = '\0';
    for (char **a = j->argv; *a && clen < size; a++)
        clen += (size_t)snprintf(command + clen, size - clen, "%s%s", a == j->argv ? "" : " ",
                                 a == j->argv ? basename(*a) : *a);
    return command;
}

/* shmrun itself, which every run of the sweep starts again. */
static int own_executable(char *self, size_t size)
{
    ssize_t len = readlink("/proc/self/exe", self, size - 1);
    if (len <= 0) {
        fprintf(stderr, "shmrun: --sweep: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    self[len] = '\0';
    return 0;
}

int sweep_main(const st_topo *t, const struct sweep_job *j)
{
    struct sweep_setting s[SWEEP_MAX_SETTINGS];
    int ns = 0, all_cores = 0;
    if (check_job(j) != 0 || plan_settings(t, j, s, &ns, &all_cores) != 0)
        return 2;
    if (j->dry_run)  /* what would run with every peer there */
        return print_plans(t, j, s, ns, j->compare_torch ? SWEEP_TORCH_SHM + 1 : 1);
    char self[1024];
    if (own_executable(self, sizeof self) != 0)
        return 1;
    struct sweep_peers peers;
    sweep_find_peers(j, self, &peers);
    int systems[SWEEP_NSYSTEMS];
    const int nsystems = systems_of(peers.nsystems, systems);
    char runs_dir[1100];
    snprintf(runs_dir, sizeof runs_dir, "%s/runs", j->out_dir);
    if (make_dir(runs_dir) != 0) {
        fprintf(stderr, "shmrun: --sweep-out %s: cannot create it: %s\n", j->out_dir, strerror(errno));
        return 1;
    }
    struct sweep_slot *slots = calloc((size_t)ns * (size_t)nsystems * (size_t)j->repeats, sizeof *slots);
    struct sweep_run *runs = calloc((size_t)ns * (size_t)nsystems * (size_t)j->repeats, sizeof *runs);
    if (!slots || !runs) {
        free(slots);
        free(runs);
        fprintf(stderr, "shmrun: out of memory\n");
        return 1;
    }
    int n = order_slots(j, s, ns, systems, nsystems, slots), done = 0, failed = 0;
    struct sweep_report rep = {.torch_asked = j->compare_torch || j->script, .torch_available = peers.nsystems > 1,
                               .script = j->script};
    sweep_describe_machine(&rep, t, j);
    probe_machine(t, j, &rep);
    char command[2048];
    rep.command = command_line(j, command, sizeof command);
    fprintf(stderr, "shmrun: sweep of %d setting%s x %d repeat%s%s%s = %d runs, results in %s/\n", ns,
            ns == 1 ? "" : "s", j->repeats, j->repeats == 1 ? "" : "s",
            peers.nsystems == 3 ? " x 3 systems" : peers.nsystems == 2 ? " x 2 systems" : "",
            nsystems > peers.nsystems ? " (+ each setting's instances alone, no exchange)" : "", n, j->out_dir);
    struct sigaction sa = {.sa_handler = on_interrupt}, old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    for (; done < n && !interrupted; done++) {
        run_one(j, s, &slots[done], done, &peers, self, &runs[done], &rep.versions);
        failed += !runs[done].ok;
        print_progress(s, &runs[done], done, n, j->target.loss, j->script);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (interrupted)
        fprintf(stderr, "shmrun: sweep interrupted after %d of %d runs; reporting those\n", done, n);
    int rc = sweep_write_outputs(j, &rep, s, ns, runs, done);
    free(slots);
    free(runs);
    if (interrupted)
        return 130;
    return rc != 0 || failed ? 1 : 0;
}
