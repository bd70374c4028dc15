/* shmrun: plan N instances on disjoint core sets with hwloc, bind them,
 * start them with their rank environment, watch them, and stop the whole
 * gang when one fails.  docs/launcher.md is the manual. */
#define _GNU_SOURCE
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gang.h"
#include "options.h"
#include "mpirun_cmd.h"
#include "sweep_run.h"
#include "shmtrain/coll.h"
#include "shmtrain/env.h"
#include "shmtrain/topo.h"

/* A TCP port nothing listens on now (the kernel's pick), for PyTorch's
 * rendezvous store; 29500, torchrun's default, if none can be had. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = 29500, fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int mkdir_p(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(buf, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

static void default_job_id(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, len, "%s-%d", stamp, (int)getpid());
}

static FILE *open_launcher_log(const char *dir, char *path, size_t len)
{
    snprintf(path, len, "%s/shmrun.log", dir);
    FILE *f = fopen(path, "ae");  /* close-on-exec: no rank inherits the launcher's log */
    if (!f)
        fprintf(stderr, "shmrun: cannot create %s: %s\n", path, strerror(errno));
    return f;
}

static void log_header(FILE *log, const st_plan *plan, int argc, char **argv, const struct shmrun_options *o)
{
    time_t now = time(NULL);
    fprintf(log, "== shmrun %s, %s", SHMRUN_VERSION, ctime(&now));
    fprintf(log, "command:");
    for (int i = 0; i < argc; i++)
        fprintf(log, " %s", argv[i]);
    fprintf(log, "\nprogram:");
    for (char **a = o->argv; *a; a++)
        fprintf(log, " %s", *a);
    fprintf(log, "\n");
    st_plan_write_table(plan, log);
    st_plan_write_json(plan, log);
}

static int write_report(const char *path, const st_plan *plan, const struct attempt *a, const char *job)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "shmrun: --report %s: cannot write: %s\n", path, strerror(errno));
        return -1;
    }
    gang_write_report(f, plan, a, job);
    if (fclose(f) != 0) {
        fprintf(stderr, "shmrun: --report %s: write failed\n", path);
        return -1;
    }
    return 0;
}

/* The gang's first failure was a bad flag (exit 2, as shmtrain and most
 * programs say it): shmrun passes that on, as a launcher of one would. */
static bool usage_error(const struct attempt *a)
{
    const struct rank_result *r = a->root_cause >= 0 ? &a->ranks[a->root_cause] : NULL;
    return r && r->exited && !r->signaled && r->exit_code == 2;
}

/* One start of the gang in DIR/attemptN: its exit status for shmrun, and
 * whether a failure is worth a restart (a bad flag is bad again). */
static int run_attempt(const st_topo *topo, const st_plan *plan, const struct shmrun_options *o, const char *job,
                       const char *dir, int attempt, FILE *log, bool *retry)
{
    char adir[1100];
    snprintf(adir, sizeof adir, "%s/attempt%d", dir, attempt);
    if (mkdir_p(adir) != 0) {
        fprintf(stderr, "shmrun: cannot create %s: %s\n", adir, strerror(errno));
        return 1;
    }
    struct gang_options g = {.argv = o->argv, .job_id = job, .attempt_dir = adir,
                             .restart_count = attempt, .max_restarts = o->max_restarts,
                             .tee_all = o->tee_all, .quiet = o->quiet, .grace_s = o->grace_s,
                             .stall_timeout_s = o->stall_timeout_s, .launcher_log = log,
                             .launcher_pid = getpid(), .master_port = free_port()};
    struct attempt a;
    fprintf(log, "-- attempt %d of %d\n", attempt + 1, o->max_restarts + 1);
    if (gang_run(topo, plan, &g, &a) != 0)
        return 1;
    int removed = st_segment_cleanup(job, plan->ninstances), rc;
    if (removed > 0)
        fprintf(log, "removed %d shared-memory segment(s) left by the gang\n", removed);
    bool ok = a.root_cause < 0 && !a.user_signal;
    gang_print_summary(log, plan, &a, job);
    bool reported = !o->report || write_report(o->report, plan, &a, job) == 0;
    if (ok) {
        if (!o->quiet)
            fprintf(stderr, "shmrun: all %d instance%s exited 0 in %.1f s\n", a.world, a.world == 1 ? "" : "s",
                    a.seconds);
        rc = reported ? 0 : 1;
    } else if (a.user_signal) {  /* asked to stop: not a failure, and not restarted */
        fprintf(stderr, "\nshmrun: job %s stopped by %s (exit %d)\n", job, strsignal(a.user_signal),
                128 + a.user_signal);
        gang_print_summary(stderr, plan, &a, job);
        rc = 128 + a.user_signal;
    } else {
        fprintf(stderr, "\nshmrun: job %s FAILED (attempt %d of %d)\n", job, attempt + 1, o->max_restarts + 1);
        gang_print_summary(stderr, plan, &a, job);
        rc = usage_error(&a) ? 2 : 1;
    }
    *retry = !ok && !a.user_signal && !usage_error(&a) && attempt < o->max_restarts;
    attempt_free(&a);
    return rc;
}

static int run_job(const st_topo *topo, const st_plan *plan, const struct shmrun_options *o, int argc, char **argv)
{
    char job[80], dir[1024], log_path[1100];
    if (o->job_id)
        snprintf(job, sizeof job, "%s", o->job_id);
    else
        default_job_id(job, sizeof job);
    snprintf(dir, sizeof dir, "%s/%s", o->log_dir, job);
    if (mkdir_p(dir) != 0) {
        fprintf(stderr, "shmrun: --log-dir: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    FILE *log = open_launcher_log(dir, log_path, sizeof log_path);
    if (!log)
        return 1;
    setvbuf(log, NULL, _IOLBF, 0);
    log_header(log, plan, argc, argv, o);
    if (!o->quiet)
        fprintf(stderr, "shmrun: job %s, logs in %s/\n", job, dir);
    const char *threads = st_env_text("OMP_NUM_THREADS");
    if (threads)
        fprintf(stderr, "shmrun: keeping the user's OMP_NUM_THREADS=%s for every instance\n", threads);
    if (st_env_set(ST_ENV_GENERIC_RANK) || st_env_set(ST_ENV_GENERIC_WORLD_SIZE))
        fprintf(stderr, "shmrun: WARNING: RANK/WORLD_SIZE already set by the user: kept as is; "
                        "shmtrain programs read SHMTRAIN_RANK/SHMTRAIN_WORLD_SIZE\n");

    int rc = 1;
    for (int attempt = 0; attempt <= o->max_restarts; attempt++) {
        bool retry = false;
        rc = run_attempt(topo, plan, o, job, dir, attempt, log, &retry);
        if (!retry)
            break;
        fprintf(stderr, "shmrun: restarting the gang (restart %d of %d)\n", attempt + 1, o->max_restarts);
        fprintf(log, "restarting the gang (restart %d of %d)\n", attempt + 1, o->max_restarts);
    }
    fclose(log);
    return rc;
}

/* The flags every run of a sweep repeats: all partitioning flags but -n/-c. */
static void sweep_child_flags(struct shmrun_options *o, char **flags)
{
    int k = 0;
    if (o->bind_arg) {
        flags[k++] = "--bind";
        flags[k++] = (char *)o->bind_arg;
    }
    if (o->req.use_logical_cores)
        flags[k++] = "--use-logical-cores";
    if (o->req.refuse_cross_numa)
        flags[k++] = "--no-cross-numa";
    if (o->req.oversubscribe)
        flags[k++] = "--oversubscribe";
    const char *lists[][2] = {{"--cores-list", o->req.cpu_list}, {"--nodes-list", o->req.node_list},
                              {"--allowed-cpus", o->req.allowed_cpus}, {"--grace", o->grace_arg},
                              {"--stall-timeout", o->stall_arg}};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        if (lists[i][1]) {
            flags[k++] = (char *)lists[i][0];
            flags[k++] = (char *)lists[i][1];
        }
    flags[k] = NULL;
    o->sweep.child_flags = flags;
}

static int sweep(struct shmrun_options *o, const st_topo *topo)
{
    char *flags[20], out[256];
    sweep_child_flags(o, flags);
    if (!o->sweep.out_dir) {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(out, sizeof out, "shmrun-sweep/%Y%m%d-%H%M%S", &tm);
        o->sweep.out_dir = out;
    }
    o->sweep.dry_run = o->dry_run;
    o->sweep.argv = o->argv;
    if (o->argv && o->argv[0]) {  /* anything but shmtrain: a user's (PyTorch) script */
        const char *program = strrchr(o->argv[0], '/') ? strrchr(o->argv[0], '/') + 1 : o->argv[0];
        o->sweep.script = strcmp(program, "shmtrain") != 0;
    }
    o->sweep.req = o->req;
    o->sweep.version = SHMRUN_VERSION;
    return sweep_main(topo, &o->sweep);
}

/* shmrun started inside another launcher's world of several processes
 * (mpirun -n 2 shmrun ..., or by a shmrun instance): each of them would
 * start a gang of its own.  A world of one around it (srun -n1) is fine. */
static bool inside_another_world(void)
{
    st_placement pl;
    if (st_placement_from_env(&pl) != ST_OK) {
        fprintf(stderr, "shmrun: %s\n", st_last_error());
        return true;
    }
    if (pl.world > 1)
        fprintf(stderr, "shmrun: started by %s as rank %d of %d: each of the %d would start a gang of its own; run "
                        "the program under %s directly, or shmrun alone\n", pl.launcher, pl.rank, pl.world, pl.world,
                pl.launcher);
    return pl.world > 1;
}

int main(int argc, char **argv)
{
    struct shmrun_options o = shmrun_options_parse(argc, argv);
    if (!o.dry_run && !o.print_mpirun && inside_another_world())
        return 2;
    st_topo *topo = NULL;
    st_plan *plan = NULL;
    if (st_topo_create(&topo, o.topo_kind, o.topo_arg) != ST_OK) {
        fprintf(stderr, "shmrun: %s\n", st_last_error());
        return 2;
    }
    if (o.sweeping) {
        int rc = sweep(&o, topo);
        st_topo_destroy(topo);
        return rc;
    }
    if (st_plan_create(&plan, topo, &o.req) != ST_OK) {
        fprintf(stderr, "shmrun: %s\n", st_last_error());
        st_topo_destroy(topo);
        return 2;
    }
    int rc = 0;
    if (o.print_mpirun) {
        mpirun_print(stdout, plan, o.hosts, o.argv);
    } else if (o.dry_run) {
        if (o.json)
            st_plan_write_json(plan, stdout);
        else
            st_plan_write_table(plan, stdout);
    } else {
        if (!o.quiet)
            st_plan_write_table(plan, stderr);
        else
            for (int i = 0; i < plan->nwarnings; i++)
                fprintf(stderr, "shmrun: WARNING: %s\n", plan->warnings[i]);
        rc = run_job(topo, plan, &o, argc, argv);
    }
    st_plan_destroy(plan);
    st_topo_destroy(topo);
    return rc;
}
