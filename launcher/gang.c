#define _GNU_SOURCE
#include "shmtrain/clock.h"
#include "gang.h"
#include "watch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/env.h"

extern char **environ;

/* ------------------------------------------------------------ helpers -- */

static void write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;  /* a full disk or closed console must not stop the gang */
        buf += w;
        n -= (size_t)w;
    }
}

/* ---------------------------------------------------------- environment -- */

struct env_entry {
    const char *key;
    char value[1200];
    bool user_wins;  /* keep the user's value if already set */
};

#define MAX_ENV 24

/* A rank that exits ST_EXIT_PEER_FAILED is waited on this long (at most
 * the grace) for the rank that failed first, before the gang is stopped. */
#define PEER_FAILED_WAIT_S 2.0

static int rank_environment(const st_plan *p, int rank, const struct gang_options *o,
                            struct env_entry *e)
{
    const st_plan_instance *in = &p->inst[rank];
    int n = 0;
    char heartbeat[600];
    watch_heartbeat_path(heartbeat, sizeof heartbeat, o->attempt_dir, rank);
#define ENV(k, user, ...)                                                        \
    do {                                                                         \
        if (n == MAX_ENV)                                                        \
            break;                                                               \
        e[n].key = (k);                                                          \
        e[n].user_wins = (user);                                                 \
        snprintf(e[n].value, sizeof e[n].value, __VA_ARGS__);                    \
        n++;                                                                     \
    } while (0)
    ENV(ST_ENV_RANK, false, "%d", rank);
    ENV(ST_ENV_WORLD_SIZE, false, "%d", p->ninstances);
    ENV(ST_ENV_LOCAL_RANK, false, "%d", rank);
    ENV(ST_ENV_LOCAL_WORLD_SIZE, false, "%d", p->ninstances);
    ENV(ST_ENV_JOB_ID, false, "%s", o->job_id);
    ENV(ST_ENV_CORES, false, "%s", in->pu_list);
    ENV(ST_ENV_NUMA_NODES, false, "%s", in->numa_list);
    ENV(ST_ENV_RESTART_COUNT, false, "%d", o->restart_count);
    ENV(ST_ENV_MAX_RESTARTS, false, "%d", o->max_restarts);
    ENV(ST_ENV_LOG_DIR, false, "%s", o->attempt_dir);
    ENV(ST_ENV_HEARTBEAT_FILE, false, "%s", heartbeat);
    /* torchrun's names for the same facts, always: a RANK in shmrun's own
     * environment cannot be every instance's (and the instance refuses
     * torchrun's names that disagree with shmrun's). */
    ENV(ST_ENV_GENERIC_RANK, false, "%d", rank);
    ENV(ST_ENV_GENERIC_WORLD_SIZE, false, "%d", p->ninstances);
    ENV(ST_ENV_GENERIC_LOCAL_RANK, false, "%d", rank);
    ENV(ST_ENV_GENERIC_LOCAL_WORLD_SIZE, false, "%d", p->ninstances);
    /* torchrun's rendezvous for a PyTorch program (init_process_group's
     * env://): rank 0 serves the store on this machine */
    ENV(ST_ENV_MASTER_ADDR, true, "%s", "127.0.0.1");
    ENV(ST_ENV_MASTER_PORT, true, "%d", o->master_port);
    ENV("OMP_NUM_THREADS", true, "%d", in->npus);
    ENV("OMP_PLACES", true, "%s", p->logical ? "threads" : "cores");
    ENV("OMP_PROC_BIND", true, "%s", "close");
    ENV(ST_ENV_LAUNCHER_PID, false, "%d", (int)o->launcher_pid);
    if (rank == 0 && !o->quiet && isatty(STDOUT_FILENO))
        ENV(ST_ENV_CONSOLE_TTY, false, "%s", "1");
#undef ENV
    return n;
}

static void log_environment(const st_plan *p, const struct gang_options *o)
{
    struct env_entry e[MAX_ENV];
    for (int r = 0; r < p->ninstances; r++) {
        int n = rank_environment(p, r, o, e);
        fprintf(o->launcher_log, "env rank %d:", r);
        for (int i = 0; i < n; i++) {
            const char *user = e[i].user_wins ? st_env_text(e[i].key) : NULL;
            if (user)
                fprintf(o->launcher_log, " %s=%s(user's; would be %s)", e[i].key, user, e[i].value);
            else
                fprintf(o->launcher_log, " %s=%s", e[i].key, e[i].value);
        }
        fprintf(o->launcher_log, "\n");
    }
}

/* ---------------------------------------------------------------- child -- */

/* In the child: own process group, binding, environment, output, exec.
 * Messages before exec go to the launcher's own stderr (the console) too,
 * so a failed binding is never hidden in a log. */
static void exec_instance(const st_topo *t, const st_plan *p, int rank,
                          const struct gang_options *o, int out_fd, const sigset_t *orig_mask)
{
    /* The instance dies with the launcher: SIGTERM when shmrun's only thread
     * (the forking one) exits, however it ends; shmtrain then leaves at once
     * (lifeline.h), anything else by SIGTERM's default.  shmrun may have died
     * between fork and prctl: then the parent is not it any more. */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != o->launcher_pid)
        _exit(126);
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    if (st_topo_is_this_system(t)) {
        char warning[512];
        if (st_plan_bind(t, p, rank, warning, sizeof warning) != ST_OK) {
            dprintf(STDERR_FILENO, "shmrun: %s\n", st_last_error());
            dprintf(out_fd, "shmrun: %s\n", st_last_error());
            _exit(126);
        }
        if (warning[0]) {
            dprintf(STDERR_FILENO, "shmrun: WARNING: %s\n", warning);
            dprintf(out_fd, "shmrun: WARNING: %s\n", warning);
        }
    }
    struct env_entry e[MAX_ENV];
    int n = rank_environment(p, rank, o, e);
    for (int i = 0; i < n; i++)
        if (!(e[i].user_wins && st_env_set(e[i].key)))
            setenv(e[i].key, e[i].value, 1);
    int err_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(out_fd, STDERR_FILENO) < 0)
        _exit(126);
    close(out_fd);
    execvp(o->argv[0], o->argv);
    int saved = errno;
    dprintf(err_fd >= 0 ? err_fd : STDERR_FILENO, "shmrun: rank %d: cannot execute '%s': %s\n",
            rank, o->argv[0], strerror(saved));
    fprintf(stderr, "shmrun: cannot execute '%s': %s\n", o->argv[0], strerror(saved));
    _exit(127);
}

/* --------------------------------------------------------------- parent -- */

struct live {
    int out_fd;          /* read end of the rank's output pipe, -1 when closed */
    int log_fd;
    bool line_start;     /* console: the next byte begins a line */
    bool running;
};

static int open_rank_log(const st_plan *p, int r, const struct gang_options *o, struct rank_result *res)
{
    snprintf(res->log_path, sizeof res->log_path, "%s/rank%d_cores_%s.log", o->attempt_dir, r,
             p->inst[r].pu_list[0] ? p->inst[r].pu_list : "none");
    int fd = open(res->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fprintf(stderr, "shmrun: cannot create log %s: %s\n", res->log_path, strerror(errno));
    return fd;
}

static void forward_output(struct live *l, int rank, const struct gang_options *o, const char *buf,
                           size_t n)
{
    if (l->log_fd >= 0)
        write_all(l->log_fd, buf, n);
    bool show = !o->quiet && (rank == 0 || o->tee_all);
    if (!show)
        return;
    if (!o->tee_all) {  /* rank 0 alone: raw, so progress bars (\r) survive */
        write_all(STDOUT_FILENO, buf, n);
        return;
    }
    char prefix[16];
    int plen = snprintf(prefix, sizeof prefix, "[r%d] ", rank);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (l->line_start) {
            write_all(STDOUT_FILENO, prefix, (size_t)plen);
            l->line_start = false;
        }
        if (buf[i] == '\n') {
            write_all(STDOUT_FILENO, buf + start, i + 1 - start);
            start = i + 1;
            l->line_start = true;
        }
    }
    if (start < n)
        write_all(STDOUT_FILENO, buf + start, n - start);
}

static void signal_all(struct attempt *a, struct live *lv, int sig, bool by_us)
{
    for (int r = 0; r < a->world; r++) {
        if (!lv[r].running)
            continue;
        kill(-a->ranks[r].pid, sig);  /* the instance's whole process group */
        if (by_us)
            a->ranks[r].stopped_by_us = true;
    }
}

/* What supervising one attempt keeps track of. */
struct supervision {
    struct attempt *a;
    struct live *lv;
    const struct gang_options *o;
    double t0;
    int alive;
    bool stopping;
    double kill_at;
    int peer_failed_first;        /* a rank that exited ST_EXIT_PEER_FAILED, or -1 */
    double peer_failed_until;     /* when to stop waiting for the real root cause */
    struct stall_watch watch;
    double next_tick;
    pid_t *pids;                  /* [world], for the watch */
    bool *running;                /* [world] */
};

static void stop_gang(struct supervision *sv, int root, const char *why)
{
    sv->a->root_cause = root;
    if (sv->alive == 0 || sv->stopping)
        return;
    fprintf(sv->o->launcher_log, "rank %d %s: stopping the gang (SIGTERM, SIGKILL after %.0f s)\n", root, why,
            sv->o->grace_s);
    signal_all(sv->a, sv->lv, SIGTERM, true);
    sv->stopping = true;
    sv->kill_at = st_now_s() + sv->o->grace_s;
}

static void reap(struct supervision *sv)
{
    struct attempt *a = sv->a;
    int status;
    pid_t pid;
    struct rusage ru;
    while ((pid = wait4(-1, &status, WNOHANG, &ru)) > 0) {
        int r = 0;
        while (r < a->world && a->ranks[r].pid != pid)
            r++;
        if (r == a->world || !sv->lv[r].running)
            continue;
        struct rank_result *res = &a->ranks[r];
        sv->lv[r].running = false;
        sv->alive--;
        res->end_s = st_now_s() - sv->t0;
        res->signaled = WIFSIGNALED(status);
        res->exited = WIFEXITED(status);
        res->signal = res->signaled ? WTERMSIG(status) : 0;
        res->exit_code = res->exited ? WEXITSTATUS(status) : -1;
        res->peer_failed = res->exited && res->exit_code == ST_EXIT_PEER_FAILED;
        res->max_rss_kb = ru.ru_maxrss;
        res->cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                     (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
        bool failed = res->signaled || res->exit_code != 0;
        fprintf(sv->o->launcher_log, "%.3f s: rank %d (pid %d) %s %d%s\n", res->end_s, r, (int)pid,
                res->signaled ? "killed by signal" : "exited with", res->signaled ? res->signal : res->exit_code,
                res->peer_failed ? " (a peer failed)" : "");
        if (!failed || a->root_cause >= 0 || a->user_signal || res->stopped_by_us)
            continue;
        if (!res->peer_failed) {
            stop_gang(sv, r, "failed");
        } else if (sv->peer_failed_first < 0) {
            /* Its peer is failing too and will say why: give it a moment. */
            sv->peer_failed_first = r;
            sv->peer_failed_until = st_now_s() + (sv->o->grace_s < PEER_FAILED_WAIT_S ? sv->o->grace_s
                                                                                   : PEER_FAILED_WAIT_S);
        }
    }
    if (a->root_cause < 0 && sv->peer_failed_first >= 0 && (sv->alive == 0 || st_now_s() >= sv->peer_failed_until))
        stop_gang(sv, sv->peer_failed_first, "stopped because a peer failed, and no other rank said why");
}

static void on_signal(struct supervision *sv, int sig)
{
    struct attempt *a = sv->a;
    if (a->user_signal) {  /* a second Ctrl-C: no more waiting */
        fprintf(stderr, "\nshmrun: second %s: killing the gang\n", strsignal(sig));
        signal_all(a, sv->lv, SIGKILL, true);
        return;
    }
    a->user_signal = sig;
    fprintf(stderr, "\nshmrun: %s: forwarding it to all instances (again to kill them)\n", strsignal(sig));
    fprintf(sv->o->launcher_log, "received %s: forwarded to the gang\n", strsignal(sig));
    signal_all(a, sv->lv, sig == SIGHUP ? SIGTERM : sig, false);
    sv->stopping = true;
    sv->kill_at = st_now_s() + sv->o->grace_s;
}

/* Every WATCH_TICK_S: a rank stopped or silent past the stall timeout is
 * the root cause; it is killed outright (a stopped process acts on nothing
 * else), the others are stopped as for any failure. */
static void watch_for_stalls(struct supervision *sv)
{
    struct attempt *a = sv->a;
    double now = st_now_s();
    if (now < sv->next_tick || sv->stopping || a->root_cause >= 0 || a->user_signal)
        return;
    sv->next_tick = now + WATCH_TICK_S;
    for (int r = 0; r < a->world; r++) {
        sv->pids[r] = a->ranks[r].pid;
        sv->running[r] = sv->lv[r].running;
    }
    char why[192];
    int r = watch_tick(&sv->watch, sv->pids, sv->running, now, why, sizeof why);
    if (r < 0)
        return;
    snprintf(a->ranks[r].stall, sizeof a->ranks[r].stall, "%s", why);
    fprintf(stderr, "shmrun: rank %d (pid %d) %s: stopping the gang\n", r, (int)a->ranks[r].pid, why);
    kill(-a->ranks[r].pid, SIGKILL);
    a->ranks[r].stopped_by_us = true;
    stop_gang(sv, r, why);
}

static int poll_timeout_ms(const struct supervision *sv)
{
    double now = st_now_s(), until = now + 3600;
    if (sv->alive == 0)
        return 100;
    if (sv->stopping && sv->kill_at < until)
        until = sv->kill_at;
    if (sv->peer_failed_first >= 0 && sv->a->root_cause < 0 && sv->peer_failed_until < until)
        until = sv->peer_failed_until;
    if (!sv->stopping && sv->next_tick < until)
        until = sv->next_tick;
    return until <= now ? 0 : (int)((until - now) * 1000) + 1;
}

static void forward_ready_output(struct supervision *sv, const struct pollfd *fds, char *buf, size_t size)
{
    for (int r = 0; r < sv->a->world; r++) {
        struct live *l = &sv->lv[r];
        if (l->out_fd < 0 || !(fds[r + 1].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = read(l->out_fd, buf, size);
        if (n > 0) {
            forward_output(l, r, sv->o, buf, (size_t)n);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close(l->out_fd);
            l->out_fd = -1;
        }
    }
}

static void supervise(struct supervision *sv, int sfd)
{
    struct attempt *a = sv->a;
    double drain_until = 0;
    struct pollfd *fds = calloc((size_t)a->world + 1, sizeof *fds);
    char buf[65536];
    if (!fds)
        return;
    for (;;) {
        int open_pipes = 0;
        for (int r = 0; r < a->world; r++)
            open_pipes += sv->lv[r].out_fd >= 0;
        if (sv->alive == 0 && drain_until == 0)
            drain_until = st_now_s() + 0.5;  /* a grandchild may hold a pipe open */
        if (sv->alive == 0 && (open_pipes == 0 || st_now_s() > drain_until))
            break;
        fds[0] = (struct pollfd){.fd = sfd, .events = POLLIN};
        for (int r = 0; r < a->world; r++)
            fds[r + 1] = (struct pollfd){.fd = sv->lv[r].out_fd, .events = POLLIN};
        int rc = poll(fds, (nfds_t)a->world + 1, poll_timeout_ms(sv));
        if (rc < 0 && errno != EINTR)
            break;
        if (fds[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGCHLD)
                    reap(sv);
                else
                    on_signal(sv, (int)si.ssi_signo);
            }
        }
        forward_ready_output(sv, fds, buf, sizeof buf);
        reap(sv);  /* SIGCHLDs can coalesce */
        watch_for_stalls(sv);
        if (sv->stopping && sv->alive > 0 && st_now_s() >= sv->kill_at) {
            fprintf(sv->o->launcher_log, "grace period over: SIGKILL to %d instance(s)\n", sv->alive);
            signal_all(a, sv->lv, SIGKILL, true);
            sv->kill_at = st_now_s() + 3600;
        }
    }
    for (int r = 0; r < a->world; r++)
        if (sv->lv[r].out_fd >= 0)
            close(sv->lv[r].out_fd);
    free(fds);
}

/* Rank r's process, its output on a pipe and its log open; -1 (said on
 * stderr) when a pipe or the fork fails. */
static int start_instance(const st_topo *t, const st_plan *p, int r, const struct gang_options *o, struct attempt *a,
                          struct live *lv, const sigset_t *orig)
{
    int pipefd[2];
    lv[r].out_fd = lv[r].log_fd = -1;
    lv[r].line_start = true;
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        fprintf(stderr, "shmrun: pipe failed: %s\n", strerror(errno));
        return -1;
    }
    lv[r].log_fd = open_rank_log(p, r, o, &a->ranks[r]);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        exec_instance(t, p, r, o, pipefd[1], orig);
    }
    close(pipefd[1]);
    if (pid < 0) {
        fprintf(stderr, "shmrun: fork failed: %s\n", strerror(errno));
        close(pipefd[0]);
        return -1;
    }
    setpgid(pid, pid);  /* also in the child: whichever runs first */
    fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
    lv[r].out_fd = pipefd[0];
    lv[r].running = true;
    a->ranks[r].pid = pid;
    fprintf(o->launcher_log, "rank %d: pid %d, PUs %s, log %s\n", r, (int)pid, p->inst[r].pu_list,
            a->ranks[r].log_path);
    return 0;
}

/* SIGCHLD and the stop signals arrive on a descriptor the supervisor polls
 * (blocked first, `orig` kept for the children and for after); -1 when
 * signalfd fails. */
static int take_signals(sigset_t *orig)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, orig);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "shmrun: signalfd failed: %s\n", strerror(errno));
        sigprocmask(SIG_SETMASK, orig, NULL);
    }
    return sfd;
}

int gang_run(const st_topo *t, const st_plan *p, const struct gang_options *o, struct attempt *a)
{
    memset(a, 0, sizeof *a);
    a->world = p->ninstances;
    a->root_cause = -1;
    a->ranks = calloc((size_t)a->world, sizeof *a->ranks);
    struct live *lv = calloc((size_t)a->world, sizeof *lv);
    struct supervision sv = {.a = a, .lv = lv, .o = o, .peer_failed_first = -1,
                             .pids = calloc((size_t)a->world, sizeof(pid_t)),
                             .running = calloc((size_t)a->world, sizeof(bool))};
    int rc = -1, sfd = -1;
    bool watching = false;
    sigset_t orig;
    if (!a->ranks || !lv || !sv.pids || !sv.running) {
        fprintf(stderr, "shmrun: out of memory\n");
        goto out;
    }
    if (watch_init(&sv.watch, a->world, o->stall_timeout_s, o->attempt_dir, o->launcher_log, st_now_s()) != 0)
        goto out;
    watching = true;
    log_environment(p, o);
    fflush(NULL);
    if ((sfd = take_signals(&orig)) < 0)
        goto out;
    sv.t0 = st_now_s();
    for (int r = 0; r < a->world; r++) {
        if (start_instance(t, p, r, o, a, lv, &orig) != 0) {
            a->world = r;  /* stop what did start */
            signal_all(a, lv, SIGKILL, true);
            break;
        }
    }
    fflush(o->launcher_log);
    sv.alive = a->world;
    sv.next_tick = st_now_s() + WATCH_TICK_S;
    supervise(&sv, sfd);
    a->seconds = st_now_s() - sv.t0;
    for (int r = 0; r < a->world; r++)
        if (lv[r].log_fd >= 0)
            close(lv[r].log_fd);
    close(sfd);
    sigprocmask(SIG_SETMASK, &orig, NULL);
    rc = 0;
out:
    if (watching)
        watch_free(&sv.watch);
    free(lv);
    free(sv.pids);
    free(sv.running);
    return rc;
}

void attempt_free(struct attempt *a)
{
    free(a->ranks);
    a->ranks = NULL;
}
