#include "shmtrain/shmname.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool st_job_id_valid(const char *job_id)
{
    if (!job_id || !*job_id || strlen(job_id) > 64)
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
