#include "shmtrain/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

const char *st_status_str(st_status s)
{
    switch (s) {
    case ST_OK: return "ok";
    case ST_ERR_INVALID: return "invalid-argument";
    case ST_ERR_NOMEM: return "out-of-memory";
    case ST_ERR_SYS: return "system-error";
    case ST_ERR_SHM_SPACE: return "shm-space";
    case ST_ERR_PEER_DEAD: return "peer-dead";
    case ST_ERR_TIMEOUT: return "timeout";
    case ST_ERR_EXISTS: return "exists";
    case ST_ERR_MISMATCH: return "mismatch";
    case ST_ERR_IO: return "io-error";
    case ST_ERR_FORMAT: return "bad-format";
    case ST_ERR_BACKEND: return "backend-error";
    case ST_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown-status";
}

const char *st_last_error(void) { return last_error; }


st_status st_fail(st_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

void st_error_keep(st_kept_error *e) { snprintf(e->msg, sizeof e->msg, "%s", last_error); }

st_status st_error_again(const st_kept_error *e, st_status s) { return st_fail(s, "%s", e->msg); }
