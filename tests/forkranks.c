#define _GNU_SOURCE
#include "forkranks.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void test_job_id(char *out, size_t len, const char *tag)
{
    static int counter;
    snprintf(out, len, "test-%s-%d-%d", tag, (int)getpid(), counter++);
}

int run_ranks(int world, const st_group_config *cfg, rank_fn fn, void *arg)
{
    return run_ranks_tweaked(world, cfg, NULL, fn, arg);
}

int run_ranks_tweaked(int world, const st_group_config *cfg, config_fn tweak, rank_fn fn, void *arg)
{
    pid_t pids[256];
    if (world > 256)
        return world;
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pid_t pid = fork();
        if (pid < 0)
            return world;
        if (pid == 0) {
            st_group_config c = *cfg;
            c.rank = r;
            c.world_size = world;
            if (tweak)
                tweak(&c, r, arg);
            st_group *g = NULL;
            st_status st = st_group_create(&g, &c);
            if (st != ST_OK) {
                fprintf(stderr, "rank %d: join failed: %s\n", r, st_last_error());
                _exit(100 + (int)st);
            }
            int rc = fn(g, r, arg);
            st_group_destroy(g);
            fflush(NULL);
            _exit(rc);
        }
        pids[r] = pid;
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int status;
        if (waitpid(pids[r], &status, 0) != pids[r] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d: status 0x%x\n", r, status);
            failed++;
        }
    }
    return failed;
}

void *shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void shared_free(void *p, size_t bytes) { munmap(p, bytes); }

int leftover_segments(const char *job_id)
{
    char prefix[160];
    snprintf(prefix, sizeof prefix, "shmtrain.%u.%s.", (unsigned)getuid(), job_id);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

pid_t spawn_redirected(char *const argv[], const char *cwd, const char *out, const char *err)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || chdir(cwd) != 0)
            _exit(125);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? calloc(1, (size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    return s;
}

uint64_t fnv1a(const void *data, size_t bytes)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int count_lines(const char *text)
{
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

static char *slurp_or_empty(const char *path)
{
    char *s = slurp(path);
    return s ? s : strdup("");
}

struct child_run child_collect(pid_t pid, const char *out, const char *err)
{
    int status = 0;
    waitpid(pid, &status, 0);
    return (struct child_run){WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp_or_empty(out),
                              slurp_or_empty(err)};
}

void child_run_free(struct child_run *r)
{
    free(r->out);
    free(r->err);
}

int test_dir_create(char *dir, size_t len, const char *name)
{
    snprintf(dir, len, "/tmp/%s.%d", name, (int)getpid());
    return mkdir(dir, 0755) == 0 ? 0 : -1;
}

int test_dir_remove(const char *dir)
{
    if (getenv("KEEP_TEST_DIR"))
        return 0;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}
