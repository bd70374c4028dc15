#define _GNU_SOURCE
#include "segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/coll.h"
#include "shmtrain/env.h"

#define MIB (1024.0 * 1024.0)

st_status st_segment_name(char *name, size_t len, const char *job_id, int rank)
{
    char what[16];
    snprintf(what, sizeof what, "%d", rank);
    return st_shm_name(name, len, job_id, what);
}

/* Remove the names in /dev/shm that start with `prefix`; with
 * older_than_s >= 0 only this user's that have not changed for that long
 * (the uid in a name is text anyone could write). */
static int unlink_prefixed(const char *prefix, double older_than_s)
{
    const time_t now = time(NULL);
    int removed = 0;
    DIR *d = opendir(ST_SHM_DIR);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[sizeof e->d_name + 16];
        struct stat sb;
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", ST_SHM_DIR, e->d_name);
        if (older_than_s >= 0 &&
            (stat(path, &sb) != 0 || sb.st_uid != getuid() || difftime(now, sb.st_mtime) < older_than_s))
            continue;
        if (shm_unlink(path + strlen(ST_SHM_DIR)) == 0)  /* "/name" */
            removed++;
    }
    if (d)
        closedir(d);
    return removed;
}

int st_segment_cleanup(const char *job_id, int world_size)
{
    if (!st_job_id_valid(job_id))
        return -1;
    int removed = 0;
    for (int r = 0; r < world_size; r++) {
        char name[ST_SEGMENT_NAME_MAX];
        if (st_segment_name(name, sizeof name, job_id, r) == ST_OK && shm_unlink(name) == 0)
            removed++;
    }
    char prefix[ST_SHM_NAME_MAX];
    if (st_shm_prefix(prefix, sizeof prefix, job_id) != ST_OK)
        return -1;
    return removed + unlink_prefixed(prefix, -1);
}

int st_segment_reap_stale(double older_than_s)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "shmtrain.%u.", (unsigned)getuid());
    return unlink_prefixed(prefix, older_than_s);
}

st_status st_shm_space_check(size_t need, size_t limit, int world, size_t per_rank)
{
    struct statvfs vfs;
    if (statvfs(ST_SHM_DIR, &vfs) != 0)
        return st_fail(ST_ERR_SYS, "shm: statvfs(%s) failed: %s", ST_SHM_DIR, strerror(errno));
    size_t avail = (size_t)vfs.f_bavail * (size_t)vfs.f_frsize;
    if (limit && limit < avail)
        avail = limit;
    if (avail >= need)
        return ST_OK;
    return st_fail(ST_ERR_SHM_SPACE,
                   "shm: %s has %.1f MiB free but the group needs %.1f MiB more "
                   "(%d ranks x %.1f MiB); enlarge it (docker run --shm-size=1g) "
                   "or lower %s",
                   ST_SHM_DIR, avail / MIB, need / MIB, world, per_rank / MIB, ST_ENV_STAGING_BYTES);
}

st_status st_segment_create(struct st_segment *s, const char *name, size_t bytes)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->bytes = bytes;

    int fd = st_shm_create(name);
    if (fd < 0) {
        if (errno == EEXIST)
            return st_fail(ST_ERR_EXISTS,
                           "shm: %s%s already exists: another job uses this job id, or a "
                           "killed one left it (remove it or pick another job id)",
                           ST_SHM_DIR, name);
        return st_fail(ST_ERR_SYS, "shm: shm_open(%s) failed: %s", name, strerror(errno));
    }
    s->linked = true;
    st_status st = ST_OK;
    if (ftruncate(fd, (off_t)bytes) != 0) {
        st = errno == EFBIG ? st_fail(ST_ERR_SYS, "shm: the segment %s of %zu bytes exceeds this process's file-size "
                                                  "limit (ulimit -f)", name, bytes)
                            : st_fail(ST_ERR_SYS, "shm: ftruncate(%s, %zu) failed: %s", name, bytes, strerror(errno));
        goto out_unlink;
    }
    /* Allocating every page now, by the owner, turns a full /dev/shm into a
     * clear error instead of a SIGBUS on first write, and places the pages
     * on the owner's NUMA node (first touch). */
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc == ENOSPC) {
        st = st_fail(ST_ERR_SHM_SPACE,
                     "shm: %s is full: cannot allocate %.1f MiB for %s; enlarge it "
                     "(docker run --shm-size=1g) or lower %s",
                     ST_SHM_DIR, bytes / MIB, name, ST_ENV_STAGING_BYTES);
        goto out_unlink;
    } else if (rc != 0 && rc != EOPNOTSUPP) {
        st = st_fail(ST_ERR_SYS, "shm: posix_fallocate(%s) failed: %s", name, strerror(rc));
        goto out_unlink;
    }
    s->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        st = st_fail(ST_ERR_SYS, "shm: mmap(%s, %zu) failed: %s", name, bytes, strerror(errno));
        goto out_unlink;
    }
    close(fd);
    return ST_OK;

out_unlink:
    close(fd);
    shm_unlink(name);
    s->linked = false;
    return st;
}

/* Whether the file behind fd (size bytes) starts with a peer's mark. */
static bool carries_mark(int fd, size_t size, struct st_segment_mark mark)
{
    uint64_t found;
    if (size < mark.offset + sizeof found)
        return false;
    return pread(fd, &found, sizeof found, (off_t)mark.offset) == (ssize_t)sizeof found && found == mark.magic;
}

/* An owner writes its mark right after sizing the segment; a file without
 * one that changed this recently may still be on its way. */
static bool just_changed(const struct stat *sb)
{
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0)
        return false;
    double age = (double)(now.tv_sec - sb->st_ctim.tv_sec) + (now.tv_nsec - sb->st_ctim.tv_nsec) * 1e-9;
    return age < 2.0;
}

st_status st_segment_attach(struct st_segment *s, const char *name, size_t bytes, struct st_segment_mark mark)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        if (errno == ENOENT)
            return ST_ERR_EXISTS;  /* not created yet */
        return st_fail(ST_ERR_SYS, "shm: shm_open(%s) failed: %s", name, strerror(errno));
    }
    st_status st = ST_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = st_fail(ST_ERR_SYS, "shm: fstat(%s) failed: %s", name, strerror(errno));
        goto out_close;
    }
    if (sb.st_uid != geteuid() || (sb.st_mode & 077) != 0) {
        st = st_fail(ST_ERR_MISMATCH,
                     "shm: %s%s is owned by uid %u with mode %03o; refusing to attach "
                     "(expected uid %u, mode 0600)",
                     ST_SHM_DIR, name, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 0777),
                     (unsigned)geteuid());
        goto out_close;
    }
    if ((size_t)sb.st_size != bytes) {
        /* Zero or short: the owner is between shm_open and ftruncate. */
        if (sb.st_size == 0 || (!carries_mark(fd, (size_t)sb.st_size, mark) && just_changed(&sb)))
            st = ST_ERR_EXISTS;  /* an owner still sizing or initialising it: try again */
        else if (carries_mark(fd, (size_t)sb.st_size, mark))
            st = st_fail(ST_ERR_MISMATCH,
                         "shm: %s is %lld bytes but this rank expects %zu: ranks were "
                         "started with different sizes (zero-copy/staging settings)",
                         name, (long long)sb.st_size, bytes);
        else
            st = st_fail(ST_ERR_MISMATCH,
                         "shm: %s%s holds %lld bytes that no rank of this job wrote (no shmtrain "
                         "header): something else created a file under this job's segment name; "
                         "remove it or pick another job id",
                         ST_SHM_DIR, name, (long long)sb.st_size);
        goto out_close;
    }
    s->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        st = st_fail(ST_ERR_SYS, "shm: mmap(%s) failed: %s", name, strerror(errno));
        goto out_close;
    }
    s->bytes = bytes;
out_close:
    close(fd);
    return st;
}

void st_segment_unlink(struct st_segment *s)
{
    if (s->linked) {
        shm_unlink(s->name);
        s->linked = false;
    }
}

void st_segment_close(struct st_segment *s)
{
    st_segment_unlink(s);
    if (s->base)
        munmap(s->base, s->bytes);
    s->base = NULL;
}
