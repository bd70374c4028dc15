#include "shmtrain/shmname.h"

#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

bool st_job_id_valid(const char *job_id)
{
    if (!job_id || !*job_id || strlen(job_id) > ST_JOB_ID_MAX)
        return false;
    for (const char *p = job_id; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '-' || c == '.';
        if (!ok)
            return false;
    }
    return true;
}

st_status st_shm_prefix(char *prefix, size_t len, const char *job_id)
{
    if (!st_job_id_valid(job_id))
        return st_fail(ST_ERR_INVALID, "job id '%s' is not usable: use 1-64 of [A-Za-z0-9_.-]",
                       job_id ? job_id : "(null)");
    int n = snprintf(prefix, len, "shmtrain.%u.%s.", (unsigned)getuid(), job_id);
    if (n < 0 || (size_t)n >= len)
        return st_fail(ST_ERR_INVALID, "shared-memory name buffer too small");
    return ST_OK;
}

st_status st_shm_name(char *name, size_t len, const char *job_id, const char *what)
{
    if (!what || !*what || strchr(what, '/'))
        return st_fail(ST_ERR_INVALID, "shared-memory object name '%s' is not usable", what ? what : "(null)");
    char prefix[ST_SHM_NAME_MAX];
    st_status st = st_shm_prefix(prefix, sizeof prefix, job_id);
    if (st != ST_OK)
        return st;
    int n = snprintf(name, len, "/%s%s", prefix, what);
    if (n < 0 || (size_t)n >= len)
        return st_fail(ST_ERR_INVALID, "shared-memory name buffer too small");
    return ST_OK;
}

/* Creations in flight and the stop: a creator counts itself in before it
 * looks at `stopped`, the stopper sets `stopped` before it waits for the
 * count to drain; with both sequentially consistent, either the creator
 * sees the stop or the stopper waits for its name to exist. */
static atomic_int creating;
static atomic_bool stopped;

int st_shm_create(const char *name)
{
    atomic_fetch_add(&creating, 1);
    int fd = -1;
    if (atomic_load(&stopped))
        errno = ECANCELED;
    else
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    const int saved = errno;
    atomic_fetch_sub(&creating, 1);
    errno = saved;
    return fd;
}

void st_shm_stop_creating(void)
{
    atomic_store(&stopped, true);
    while (atomic_load(&creating) > 0)
        sched_yield();
}
