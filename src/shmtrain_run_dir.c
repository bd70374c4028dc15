/* The run directory (src/shmtrain_run_dir.h).
 *
 * Its name must be the same on every instance without any talk between
 * them (they have not met yet): the launcher's job id where there is one
 * (shmrun's names each launch, and a restarted gang keeps it, so a restart
 * continues in the same folder), else the time of a lone instance. */
#define _GNU_SOURCE
#include "shmtrain_run_dir.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmtrain/env.h"

#define RUNS "runs"
#define CHECKPOINT_NAME "shmtrain.ckpt"

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* "models/tiny.model" -> "tiny"; "gpt-mini" -> "gpt-mini". */
static void model_base(const char *model, char *out, size_t len)
{
    const char *slash = strrchr(model, '/');
    const char *name = slash ? slash + 1 : model;
    const char *dot = strrchr(name, '.');
    const int n = dot && dot != name ? (int)(dot - name) : (int)strlen(name);
    snprintf(out, len, "%.*s", n > 64 ? 64 : n, name);
}

static int default_name(const st_train_options *o, const st_placement *p, char *dir, size_t len, char *why,
                        size_t wlen)
{
    char base[80];
    model_base(o->model, base, sizeof base);
    const char *job = st_env_shared_job_id();
    if (job) {
        snprintf(dir, len, RUNS "/%s-%s", base, job);
        return 0;
    }
    if (p->world > 1) {
        snprintf(why, wlen, "%d instances started by %s share no job id (" ST_ENV_JOB_ID ", " ST_ENV_TORCH_JOB ", "
                 ST_ENV_SLURM_JOB ") to name a run folder by: give --out DIR (or --checkpoint FILE and --metrics FILE)",
                 p->world, p->launcher);
        return -1;
    }
    char stamp[32];
    const time_t now = time(NULL);
    struct tm utc;
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", gmtime_r(&now, &utc));
    snprintf(dir, len, RUNS "/%s-%s", base, stamp);
    for (int k = 2; k < 1000 && access(dir, F_OK) == 0; k++)  /* two runs in one second */
        snprintf(dir, len, RUNS "/%s-%s-%d", base, stamp, k);
    return 0;
}

/* mkdir -p, the last component included. */
static int make_dirs(const char *path, char *why, size_t len)
{
    char partial[RUN_DIR_PATH_MAX];
    snprintf(partial, sizeof partial, "%s", path);
    for (char *s = partial + 1;; s++) {
        const bool end = *s == '\0';
        if (*s != '/' && !end)
            continue;
        *s = '\0';
        if (mkdir(partial, 0777) != 0 && errno != EEXIST) {
            snprintf(why, len, "--out %s: cannot create %s: %s", path, partial, strerror(errno));
            return -1;
        }
        if (end)
            break;
        *s = '/';
    }
    if (!is_dir(path)) {
        snprintf(why, len, "--out %s: not a folder", path);
        return -1;
    }
    return 0;
}

/* A folder that holds a run's files is not written over silently. */
static int refuse_a_used_folder(const char *dir, char *why, size_t len)
{
    static const char *const files[] = {CHECKPOINT_NAME, "metrics.jsonl", "config.txt"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[RUN_DIR_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (access(path, F_OK) == 0) {
            snprintf(why, len, "--out %s holds a run already (%s): --resume %s continues it, --overwrite writes "
                     "over it, or give another --out", dir, files[i], dir);
            return -1;
        }
    }
    return 0;
}

/* config.txt, written aside and renamed: a crash leaves the old one or the
 * new one, never half of one. */
static int write_config(const char *dir, const char *text, char *why, size_t len)
{
    char path[RUN_DIR_PATH_MAX + 32], tmp[RUN_DIR_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.txt", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(text, f) >= 0;
    ok = f && fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(why, len, "--out %s: cannot write config.txt: %s", dir, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* runs/latest -> the newest run, replaced in one rename; a "latest" that is
 * not a link is the user's and left alone. */
static void point_latest(const char *dir)
{
    struct stat sb;
    if (lstat(RUNS "/latest", &sb) == 0 && !S_ISLNK(sb.st_mode))
        return;
    char tmp[64];
    snprintf(tmp, sizeof tmp, RUNS "/.latest.%d", (int)getpid());
    if (symlink(dir + strlen(RUNS "/"), tmp) != 0 || rename(tmp, RUNS "/latest") != 0) {
        fprintf(stderr, "shmtrain: warning: " RUNS "/latest not updated: %s\n", strerror(errno));
        unlink(tmp);
    }
}

/* Under shmrun the job's log folder has always held metrics.jsonl (its
 * sweeps read it there): a link to the run's keeps that true. */
static void link_metrics_into_log_dir(const char *metrics)
{
    const char *log_dir = getenv(ST_ENV_LOG_DIR);
    char target[PATH_MAX], link[RUN_DIR_PATH_MAX + 32];
    if (!log_dir || !*log_dir || !realpath(".", target))
        return;
    snprintf(link, sizeof link, "%s/metrics.jsonl", log_dir);
    const size_t n = strlen(target);
    snprintf(target + n, sizeof target - n, "/%s", metrics);
    if (metrics[0] == '/')
        snprintf(target, sizeof target, "%s", metrics);
    if (access(link, F_OK) != 0 && symlink(target, link) != 0)
        fprintf(stderr, "shmtrain: warning: %s: cannot link to %s: %s\n", link, target, strerror(errno));
}

/* runs/latest's run ("runs/<name>"), or NULL. */
static const char *latest_run(void)
{
    static char dir[RUN_DIR_PATH_MAX];
    const size_t at = strlen(RUNS "/");
    const ssize_t n = readlink(RUNS "/latest", dir + at, sizeof dir - at - 1);
    if (n <= 0)
        return NULL;
    memcpy(dir, RUNS "/", at);
    dir[at + (size_t)n] = '\0';
    return dir;
}

const char *run_dir_resumed(const char *value, const char *out, bool checkpoint_named)
{
    if (!value)
        return NULL;
    if (*value)
        return is_dir(value) ? value : NULL;
    return checkpoint_named ? NULL : out ? out : latest_run();
}

/* The run in *dir (run_dir_resumed) goes on, in *dir, from its checkpoint;
 * *dir stays NULL when the resume names a file (or there is none). */
static int resuming_in(const struct run_dir_request *rq, st_train_options *o, struct run_dir *rd, const char **dir,
                       char *why, size_t len)
{
    *dir = run_dir_resumed(o->resume, rq->out, rq->checkpoint_named);
    if (o->resume && !*o->resume && !*dir) {
        if (!rq->checkpoint_named) {
            snprintf(why, len, "--resume: no " RUNS "/latest to continue; give --resume DIR (a run's folder) or FILE");
            return -1;
        }
        o->resume = o->checkpoint;  /* --checkpoint FILE --resume: that file */
    }
    if (*dir) {
        snprintf(rd->resume, sizeof rd->resume, "%s/" CHECKPOINT_NAME, *dir);
        o->resume = rd->resume;
        if (access(rd->resume, R_OK) != 0) {
            snprintf(why, len, "--resume %s: no " CHECKPOINT_NAME " in it to go on from", *dir);
            return -1;
        }
    }
    return 0;
}

static int name_the_folder(const struct run_dir_request *rq, const st_train_options *o, const st_placement *p,
                           const char *resuming, struct run_dir *rd, char *why, size_t len)
{
    if (resuming && rq->out && strcmp(resuming, rq->out)) {
        snprintf(why, len, "--resume %s and --out %s: a resumed run goes on in its own folder; give one", resuming,
                 rq->out);
        return -1;
    }
    const char *out = resuming ? resuming : rq->out;
    if (out) {
        snprintf(rd->path, sizeof rd->path, "%s", out);
        return 0;
    }
    return default_name(o, p, rd->path, sizeof rd->path, why, len);
}

int run_dir_prepare(const struct run_dir_request *rq, st_train_options *o, struct run_dir *rd, char *why,
                    size_t len)
{
    memset(rd, 0, sizeof *rd);
    const char *resuming;
    if (resuming_in(rq, o, rd, &resuming, why, len))
        return -1;
    if (!resuming && !rq->out && (rq->checkpoint_named || rq->metrics_named))
        return 0;  /* the outputs the user named, where they named them */
    st_placement p;
    if (st_placement_from_env(&p) != ST_OK)  /* the trainer reports what is wrong with the environment */
        p = (st_placement){.rank = 0, .world = 1};
    if (name_the_folder(rq, o, &p, resuming, rd, why, len))
        return -1;
    const char *restarts = getenv(ST_ENV_RESTART_COUNT);
    const bool reuse = resuming || rq->overwrite || (restarts && atoi(restarts) > 0);
    /* config.txt says how the run started: a resume or a restart keeps it
     * (and a resume that fails cannot spoil it). */
    char config[RUN_DIR_PATH_MAX + 16];
    snprintf(config, sizeof config, "%s/config.txt", rd->path);
    const bool keep_config = !rq->overwrite && reuse && access(config, F_OK) == 0;
    if (p.rank == 0 && (make_dirs(rd->path, why, len) || (!reuse && refuse_a_used_folder(rd->path, why, len)) ||
                        (rq->config_text && !keep_config && write_config(rd->path, rq->config_text, why, len))))
        return -1;
    rd->used = true;
    snprintf(rd->checkpoint, sizeof rd->checkpoint, "%s/" CHECKPOINT_NAME, rd->path);
    snprintf(rd->metrics, sizeof rd->metrics, "%s/metrics.jsonl", rd->path);
    if (!rq->checkpoint_named)
        o->checkpoint = rq->no_checkpoint ? NULL : rd->checkpoint;
    if (!rq->metrics_named) {
        o->metrics = rd->metrics;
        o->events_dir = rd->path;  /* TensorBoard's events beside the metrics */
    }
    if (p.rank == 0 && !rq->out && !resuming)
        point_latest(rd->path);
    if (p.rank == 0 && !rq->metrics_named)
        link_metrics_into_log_dir(rd->metrics);
    rd->rank0 = p.rank == 0;
    rd->events = o->events_dir != NULL;
    if (p.rank == 0 && !o->quiet)
        printf("shmtrain: run folder %s%s (%s%s)\n", rd->path, resuming ? ", resumed" : "",
               o->checkpoint == rd->checkpoint ? CHECKPOINT_NAME ", " : "",
               o->metrics == rd->metrics ? "metrics.jsonl, config.txt" : "config.txt");
    return 0;
}

/* The curves, read by gnuplot straight from scalars.csv (a static script:
 * `gnuplot curves.gp` in the folder redraws them after a resume). */
static const char curves_script[] =
    "# written by shmtrain; in this folder, `gnuplot curves.gp` draws curves.svg again\n"
    "set terminal svg size 1200,340 dynamic font 'sans,11' background '#ffffff'\n"
    "set output 'curves.svg'\nset datafile separator ','\nset grid\nset xlabel 'step'\n"
    "series(tag) = sprintf(\"< grep -F ',%s,' scalars.csv\", tag)\n"
    "set multiplot layout 1,3\n"
    "set key top right\nset title 'loss'\nplot series('train/loss') using 1:3 with lines lw 2 title 'training', \\\n"
    "     series('eval/loss') using 1:3 with linespoints lw 2 pt 7 title 'validation'\n"
    "set key bottom right\nset title 'accuracy'\nplot series('train/accuracy') using 1:3 with lines lw 2 title 'training', \\\n"
    "     series('eval/accuracy') using 1:3 with linespoints lw 2 pt 7 title 'validation'\n"
    "set title 'samples/s (all instances)'\n"
    "plot series('train/samples_per_s') using 1:3 with lines lw 2 notitle\n"
    "unset multiplot\n";

void run_dir_draw(const struct run_dir *rd)
{
    if (!rd->used || !rd->rank0 || !rd->events)
        return;
    char path[RUN_DIR_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/curves.gp", rd->path);
    FILE *f = fopen(path, "w");
    const bool written = f && fputs(curves_script, f) >= 0;
    if (!f || fclose(f) != 0 || !written) {
        fprintf(stderr, "shmtrain: warning: %s: %s (no curves)\n", path, strerror(errno));
        return;
    }
    const pid_t pid = fork();
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0 && (dup2(null, STDOUT_FILENO) < 0 || dup2(null, STDERR_FILENO) < 0))
            _exit(127);
        if (chdir(rd->path) == 0)
            execlp("gnuplot", "gnuplot", "curves.gp", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "shmtrain: %s/curves.svg not drawn (%s); `gnuplot curves.gp` there draws it\n", rd->path,
                pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "no gnuplot here" : "gnuplot failed");
}
