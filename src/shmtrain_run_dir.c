/* The run directory (src/shmtrain_run_dir.h).
 *
 * Its name must be the same on every instance without any talk between
 * them (they have not met yet): the launcher's job id where there is one
 * (shmrun's names each launch, and a restarted gang keeps it, so a restart
 * continues in the same folder), else the time of a lone instance.  Every
 * instance checks the outputs the same way before any is written, so a
 * refusal stops all of them at once with the same words. */
#define _GNU_SOURCE
#include "shmtrain_run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/env.h"
#include "shmtrain/paths.h"
#include "shmtrain_console.h"

#define RUNS "runs"
#define CHECKPOINT_NAME "shmtrain.ckpt"

/* What a run writes in its folder: the names --overwrite removes and the
 * check for a folder that holds a run looks for (a prefix where the name
 * goes on: "events.out.tfevents." and the step checkpoints). */
static const char *const RUN_FILES[] = {CHECKPOINT_NAME, "best.ckpt", "metrics.jsonl", "scalars.csv", "console.log",
                                        "config.txt",    "curves.svg", "curves.gp",     "kernels.txt", NULL};
static const char *const RUN_FILE_PREFIXES[] = {"events.out.tfevents.", "shmtrain-step", NULL};

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static bool restarted(void)
{
    int restarts = 0;
    return st_env_int(ST_ENV_RESTART_COUNT, 0, &restarts) && restarts > 0;
}

/* Is `name` one of a run's files? */
static bool is_run_file(const char *name)
{
    for (int i = 0; RUN_FILES[i]; i++)
        if (!strcmp(name, RUN_FILES[i]))
            return true;
    for (int i = 0; RUN_FILE_PREFIXES[i]; i++)
        if (!strncmp(name, RUN_FILE_PREFIXES[i], strlen(RUN_FILE_PREFIXES[i])))
            return true;
    return false;
}

/* Files that mark a whole run, not only some of its outputs. */
static bool is_run_marker(const char *name)
{
    return !strcmp(name, "config.txt") || !strcmp(name, CHECKPOINT_NAME) || !strcmp(name, "metrics.jsonl");
}

/* One of a run's files in `dir` (into found), or false.  A file that marks
 * a whole run is named before any other, whatever order readdir() gives:
 * the refusal's words must not depend on the file system. */
static bool holds_run_files(const char *dir, char *found, size_t len)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool any = false;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_run_file(e->d_name) || (any && !is_run_marker(e->d_name)))
            continue;
        snprintf(found, len, "%s", e->d_name);
        any = true;
        if (is_run_marker(e->d_name))
            break;
    }
    closedir(d);
    return any;
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

/* `*by_time`: the name is this instance's clock's (a lone instance), and
 * may take a "-2" where a run of the same second has it; a job's name is
 * every instance's and never changes. */
static int default_name(const st_train_options *o, const st_placement *p, char *dir, size_t len, bool *by_time,
                        char *why, size_t wlen)
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
    *by_time = true;
    return 0;
}

/* The folders above `path` (mkdir -p), each a folder or said why not. */
static int make_parents(const char *flag, const char *path, char *why, size_t len)
{
    char partial[RUN_DIR_PATH_MAX];
    snprintf(partial, sizeof partial, "%s", path);
    for (char *s = partial + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        if (mkdir(partial, 0777) != 0 && errno != EEXIST) {
            snprintf(why, len, "%s %s: cannot create the folder %s: %s%s", flag, path, partial, strerror(errno),
                     errno == EACCES || errno == EROFS ? " (give --out DIR where you can write)" : "");
            return -1;
        }
        if (!is_dir(partial)) {
            snprintf(why, len, "%s %s: %s is a file, not a folder%s", flag, path, partial,
                     strcmp(partial, RUNS) ? "" : " (run folders go in runs/); give --out DIR");
            return -1;
        }
        *s = '/';
    }
    return 0;
}

/* The run's own folder: made here (rd->created), or one that exists; a
 * name by the clock taken meanwhile by a run in the same second gets "-2".. */
static int make_folder(const struct run_dir_request *rq, struct run_dir *rd, char *why, size_t len)
{
    const char *flag = rq->out ? "--out" : "the run folder";
    if (make_parents(flag, rd->path, why, len))
        return -1;
    const size_t base = strlen(rd->path);
    for (int k = 2; mkdir(rd->path, 0777) != 0; k++) {
        if (errno != EEXIST || !rd->named_by_time || k > 999) {
            if (errno == EEXIST && is_dir(rd->path))
                return 0;
            snprintf(why, len, "%s %s: %s", flag, rd->path,
                     errno == EEXIST ? "a file, not a folder" : strerror(errno));
            if (errno == EACCES || errno == EROFS)
                snprintf(why + strlen(why), len - strlen(why), " (give --out DIR where you can write)");
            return -1;
        }
        snprintf(rd->path + base, sizeof rd->path - base, "-%d", k);
    }
    rd->created = true;
    return 0;
}

/* A named output holding something already is not written over silently. */
static int refuse_named(const char *flag, const char *path, bool reuse, char *why, size_t len)
{
    if (!path || reuse || !exists(path))
        return 0;
    snprintf(why, len, "%s %s exists already: --resume %s continues its run, --overwrite writes over it, or give "
             "another name", flag, path, path);
    return -1;
}

/* runs/latest -> the newest run's checkpoint, replaced in one rename; a
 * "latest" that is not a link is the user's and left alone.  Only a run
 * that checkpoints in its folder moves it (--resume alone goes on there). */
static void point_latest(const struct run_dir *rd, const char *checkpoint)
{
    struct stat sb;
    if (strncmp(rd->path, RUNS "/", strlen(RUNS "/")) || !checkpoint || strcmp(checkpoint, rd->checkpoint) ||
        (lstat(RUNS "/latest", &sb) == 0 && !S_ISLNK(sb.st_mode)))
        return;
    char tmp[64], target[RUN_DIR_PATH_MAX];
    snprintf(tmp, sizeof tmp, RUNS "/.latest.%d", (int)getpid());
    snprintf(target, sizeof target, "%s/" CHECKPOINT_NAME, rd->path + strlen(RUNS "/"));
    if (symlink(target, tmp) != 0 || rename(tmp, RUNS "/latest") != 0) {
        fprintf(stderr, "shmtrain: warning: " RUNS "/latest not updated: %s\n", strerror(errno));
        unlink(tmp);
    }
}

/* runs/latest's run folder ("runs/<name>", or the link's own absolute
 * folder), or NULL. */
static const char *latest_run(void)
{
    static char dir[RUN_DIR_PATH_MAX + 16];
    char target[RUN_DIR_PATH_MAX];
    const ssize_t n = readlink(RUNS "/latest", target, sizeof target - 1);
    if (n <= 0)
        return NULL;
    target[n] = '\0';
    char *slash = strrchr(target, '/');
    if (slash && !strcmp(slash + 1, CHECKPOINT_NAME))
        *slash = '\0';  /* the link names the checkpoint; earlier builds linked the folder */
    if (target[0] == '/')
        snprintf(dir, sizeof dir, "%s", target);
    else
        snprintf(dir, sizeof dir, RUNS "/%s", target);
    return dir;
}

/* A run folder's own checkpoint (DIR/shmtrain.ckpt beside its config.txt): its folder. */
static const char *folder_of_checkpoint(const char *file)
{
    static char dir[RUN_DIR_PATH_MAX];
    const char *slash = strrchr(file, '/');
    if (strcmp(slash ? slash + 1 : file, CHECKPOINT_NAME))
        return NULL;
    st_path_folder(file, dir, sizeof dir);
    char config[RUN_DIR_PATH_MAX + 16];
    snprintf(config, sizeof config, "%s/config.txt", dir);
    return access(config, F_OK) == 0 ? dir : NULL;
}

const char *run_dir_resumed(const char *value, const char *out, bool checkpoint_named)
{
    if (!value)
        return NULL;
    if (*value)
        return is_dir(value) ? value : folder_of_checkpoint(value);
    return checkpoint_named ? NULL : out ? out : latest_run();
}

/* The run in *dir (run_dir_resumed) goes on, in *dir, from its checkpoint;
 * *dir stays NULL when the resume names another file. */
static int resuming_in(const struct run_dir_request *rq, st_train_options *o, struct run_dir *rd, const char **dir,
                       char *why, size_t len)
{
    *dir = run_dir_resumed(o->resume, rq->out, rq->checkpoint_named);
    if (o->resume && *o->resume && !*dir && !exists(o->resume)) {
        snprintf(why, len, "--resume %s: no such file or folder", o->resume);
        return -1;
    }
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
            snprintf(why, len, "--resume %s: no " CHECKPOINT_NAME " in it to go on from%s", *dir,
                     is_dir(*dir) ? "" : " (the run's folder is gone)");
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
    if (out && strlen(out) > RUN_DIR_NAME_MAX) {
        snprintf(why, len, "--out: a name of %zu bytes; at most %d (the run's files go inside it)", strlen(out),
                 RUN_DIR_NAME_MAX);
        return -1;
    }
    if (out) {
        snprintf(rd->path, sizeof rd->path, "%s", out);
        return 0;
    }
    return default_name(o, p, rd->path, sizeof rd->path, &rd->named_by_time, why, len);
}

/* The outputs inside the folder (those the command line did not name). */
static void place_outputs(const struct run_dir_request *rq, st_train_options *o, struct run_dir *rd)
{
    rd->used = true;
    snprintf(rd->checkpoint, sizeof rd->checkpoint, "%s/" CHECKPOINT_NAME, rd->path);
    snprintf(rd->metrics, sizeof rd->metrics, "%s/metrics.jsonl", rd->path);
    if (!rq->checkpoint_named) {
        o->checkpoint = rq->no_checkpoint ? NULL : rd->checkpoint;
        rd->checkpoint_used = o->checkpoint;
        snprintf(rd->best, sizeof rd->best, "%s/best.ckpt", rd->path);
        o->keep_best_path = rd->best;
    }
    if (!rq->metrics_named)
        o->metrics = rd->metrics;
    o->events_dir = rd->path;  /* TensorBoard's events, scalars.csv and console.log beside the metrics */
}

/* Named outputs and, with a folder, the folder: nothing holding a result
 * is written over unless resumed, restarted or overwritten. */
static int check_outputs(const struct run_dir_request *rq, const st_train_options *o, struct run_dir *rd, bool reuse,
                         char *why, size_t len)
{
    const bool resuming_named = o->resume && o->checkpoint && st_same_file(o->resume, o->checkpoint);
    char best[RUN_DIR_PATH_MAX + 16] = "";
    if (rq->checkpoint_named && o->keep_best && o->checkpoint)
        st_train_best_path(o->checkpoint, best, sizeof best);
    if ((rq->checkpoint_named && refuse_named("--checkpoint", o->checkpoint, reuse || resuming_named, why, len)) ||
        (rq->metrics_named && refuse_named("--metrics", o->metrics, reuse || o->resume, why, len)) ||
        (best[0] && refuse_named("--keep-best's", best, reuse || resuming_named, why, len)))
        return -1;
    char found[256];
    if (!rd->used || reuse || rd->named_by_time || !holds_run_files(rd->path, found, sizeof found))
        return 0;  /* a name by the clock that a run of the same second took becomes another */
    snprintf(why, len, "%s %s holds %s already (%s): --resume %s continues it, --overwrite writes over it, or give "
             "another --out", rq->out ? "--out" : "the run folder", rd->path,
             is_run_marker(found) ? "a run" : "files a run writes", found, rd->path);
    return -1;
}

int run_dir_prepare(const struct run_dir_request *rq, st_train_options *o, struct run_dir *rd, char *why,
                    size_t len)
{
    memset(rd, 0, sizeof *rd);
    rd->config_text = rq->config_text;
    const char *resuming;
    if (resuming_in(rq, o, rd, &resuming, why, len))
        return -1;
    rd->resuming = resuming != NULL;
    st_placement p;
    if (st_placement_from_env(&p) != ST_OK)  /* the trainer reports what is wrong with the environment */
        p = (st_placement){.rank = 0, .world = 1};
    rd->rank0 = p.rank == 0;
    rd->instances = p.world;
    const bool reuse = resuming || rq->overwrite || restarted();
    const bool folder = resuming || rq->out || !(rq->checkpoint_named && rq->metrics_named);
    if (folder && name_the_folder(rq, o, &p, resuming, rd, why, len))
        return -1;
    if (folder)
        place_outputs(rq, o, rd);
    if (check_outputs(rq, o, rd, reuse, why, len))
        return -1;
    if (folder && rd->rank0 && make_folder(rq, rd, why, len))
        return -1;
    if (folder && rd->created && rd->rank0)
        place_outputs(rq, o, rd);  /* the name may have grown a "-2" */
    if (rd->rank0)
        console_keep_start();  /* held in memory until the run begins: a failed start writes nothing */
    if (rd->rank0 && !o->quiet && folder)
        printf("shmtrain: run folder %s%s\n", rd->path, resuming ? ", resumed" : "");
    return 0;
}

/* --overwrite: the old run's files go, the user's others stay. */
static void remove_run_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[RUN_DIR_PATH_MAX + 256];
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_run_file(e->d_name))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT)
            fprintf(stderr, "shmtrain: warning: --overwrite: %s: %s\n", path, strerror(errno));
    }
    closedir(d);
}

/* config.txt, written aside and renamed: a crash leaves the old one or the
 * new one, never half of one. */
static void write_config(const struct run_dir *rd)
{
    char path[RUN_DIR_PATH_MAX + 32], tmp[RUN_DIR_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.txt", rd->path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(rd->config_text, f) >= 0 && fprintf(f, "instances %d\n", rd->instances) > 0;
    ok = f && fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "shmtrain: warning: %s not written: %s (the run cannot be repeated from it)\n", path,
                strerror(errno));
        unlink(tmp);
    }
}

/* Under shmrun the job's log folder has always held metrics.jsonl (its
 * sweeps read it there): a link to the run's keeps that true. */
static void link_metrics_into_log_dir(const char *metrics)
{
    const char *log_dir = st_env_text(ST_ENV_LOG_DIR);
    char target[PATH_MAX + RUN_DIR_PATH_MAX + 80], link[RUN_DIR_PATH_MAX + 32];
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

void run_dir_begin(void *run_dir)
{
    struct run_dir *rd = run_dir;
    if (!rd->rank0 || rd->began)
        return;
    rd->began = true;
    if (!rd->used)
        return;
    char config[RUN_DIR_PATH_MAX + 16];
    snprintf(config, sizeof config, "%s/config.txt", rd->path);
    const bool overwrite = !rd->resuming && !restarted() && !rd->created;
    if (overwrite)
        remove_run_files(rd->path);
    /* config.txt says how the run started: a resume or a restart keeps it */
    if (rd->config_text && (overwrite || rd->created || access(config, F_OK) != 0))
        write_config(rd);
    if (!rd->resuming)
        point_latest(rd, rd->checkpoint_used);
    link_metrics_into_log_dir(rd->metrics);
    char console[RUN_DIR_PATH_MAX + 16];
    snprintf(console, sizeof console, "%s/console.log", rd->path);
    console_keep_in(console);
}

/* The curves, read by gnuplot straight from scalars.csv (a static script:
 * `gnuplot curves.gp` in the folder redraws them after a resume); points
 * as well as lines, so that a run of one logged step shows it. */
static const char curves_script[] =
    "# written by shmtrain; in this folder, `gnuplot curves.gp` draws curves.svg again\n"
    "set terminal svg size 1200,340 dynamic font 'sans,11' background '#ffffff'\n"
    "set output 'curves.svg'\nset datafile separator ','\nset grid\nset xlabel 'step'\n"
    "series(tag) = sprintf(\"< grep -F ',%s,' scalars.csv\", tag)\n"
    "set multiplot layout 1,3\n"
    "set key top right\nset title 'loss'\n"
    "plot series('train/loss') using 1:3 with linespoints lw 2 pt 7 ps 0.4 title 'training', \\\n"
    "     series('eval/loss') using 1:3 with linespoints lw 2 pt 7 title 'validation'\n"
    "set key bottom right\nset title 'accuracy'\n"
    "plot series('train/accuracy') using 1:3 with linespoints lw 2 pt 7 ps 0.4 title 'training', \\\n"
    "     series('eval/accuracy') using 1:3 with linespoints lw 2 pt 7 title 'validation'\n"
    "set title 'samples/s (all instances)'\n"
    "plot series('train/samples_per_s') using 1:3 with linespoints lw 2 pt 7 ps 0.4 notitle\n"
    "unset multiplot\n";

static void draw_curves(const struct run_dir *rd)
{
    char path[RUN_DIR_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/scalars.csv", rd->path);
    struct stat sb;
    if (stat(path, &sb) != 0 || sb.st_size < 40)  /* the header alone: nothing was logged */
        return;
    snprintf(path, sizeof path, "%s/curves.gp", rd->path);
    FILE *f = fopen(path, "w");
    const bool written = f && fputs(curves_script, f) >= 0;
    if (!f || fclose(f) != 0 || !written) {
        fprintf(stderr, "shmtrain: warning: %s: %s (no curves)\n", path, strerror(errno));
        return;
    }
    const int status = console_run_quietly(rd->path, "gnuplot", "curves.gp");
    if (status != 0)
        fprintf(stderr, "shmtrain: %s/curves.svg not drawn (%s); `gnuplot curves.gp` there draws it\n", rd->path,
                status == 127 ? "no gnuplot here" : "gnuplot failed");
}

void run_dir_end(struct run_dir *rd)
{
    if (!rd->rank0)
        return;
    if (rd->used && rd->began)
        draw_curves(rd);
    console_keep_stop();
    if (rd->created && !rd->began)
        rmdir(rd->path);  /* a start that failed: the empty folder it made goes (a non-empty one stays) */
}
