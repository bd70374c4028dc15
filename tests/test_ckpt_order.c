/* The order of a checkpoint write's durable steps (issue 33): the
 * temporary file's data reaches the disk (fsync) before the rename makes it
 * the checkpoint, and the directory is synced after the rename, so that a
 * power cut leaves the old checkpoint or the new one, never a renamed file
 * whose data is lost.  fsync and rename are interposed at link time
 * (-Wl,--wrap), so the test sees every call the writer makes. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmtrain/ckpt.h"

enum { MAX_EVENTS = 16 };
static char events[MAX_EVENTS][2048];
static int nevents;

int __real_fsync(int fd);
int __real_rename(const char *from, const char *to);
int __wrap_fsync(int fd);
int __wrap_rename(const char *from, const char *to);

int __wrap_fsync(int fd)
{
    char link[64], target[1024] = "?";
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    target[n > 0 ? n : 1] = '\0';
    if (nevents < MAX_EVENTS)
        snprintf(events[nevents++], sizeof events[0], "fsync %s", target);
    return __real_fsync(fd);
}

int __wrap_rename(const char *from, const char *to)
{
    if (nevents < MAX_EVENTS)
        snprintf(events[nevents++], sizeof events[0], "rename %s", to);
    return __real_rename(from, to);
}

static char dir[512];

static void test_fsync_then_rename_then_directory(void **state)
{
    (void)state;
    char path[600], want[3][2048], tmp[700];
    snprintf(path, sizeof path, "%s/run.ckpt", dir);
    float params[3] = {1, 2, 3};
    st_ckpt c = {.model_text = "input 1 1 1\nlinear 1\n", .params = params, .nparams = 2};
    for (int round = 0; round < 2; round++) {  /* a new file, then one replaced */
        nevents = 0;
        assert_int_equal(st_ckpt_write(path, &c), ST_OK);
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        snprintf(want[0], sizeof want[0], "fsync %s", tmp);
        snprintf(want[1], sizeof want[1], "rename %s", path);
        snprintf(want[2], sizeof want[2], "fsync %s", dir);
        if (nevents != 3)
            fail_msg("round %d: %d durable steps (%s, %s, ...), expected 3", round, nevents,
                     nevents > 0 ? events[0] : "-", nevents > 1 ? events[1] : "-");
        for (int i = 0; i < 3; i++)
            if (strcmp(events[i], want[i]))
                fail_msg("round %d, step %d: '%s', expected '%s'", round, i, events[i], want[i]);
    }
    st_ckpt r;
    assert_int_equal(st_ckpt_read(path, &r), ST_OK);
    assert_int_equal(r.nparams, 2);
    st_ckpt_free(&r);
}

static int setup(void **state)
{
    (void)state;
    char made[256];
    if (test_dir_create(made, sizeof made, "ckpt-order") != 0)
        return -1;
    char real[PATH_MAX];
    if (!realpath(made, real) || strlen(real) >= sizeof dir)  /* /proc's links name the resolved path */
        return -1;
    memcpy(dir, real, strlen(real) + 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return test_dir_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fsync_then_rename_then_directory)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
