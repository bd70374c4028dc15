/* shmtrain status codes and the per-thread error message.
 *
 * Every library function that can fail returns an st_status.  On failure it
 * also leaves a one-line, human-readable explanation (naming the file, flag,
 * rank or syscall involved) in a thread-local buffer read by st_last_error().
 * The library never exits the process and never prints on its own.
 */
#ifndef SHMTRAIN_STATUS_H
#define SHMTRAIN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_status {
    ST_OK = 0,
    ST_ERR_INVALID = 1,   /* bad argument or configuration */
    ST_ERR_NOMEM = 2,     /* allocation failed */
    ST_ERR_SYS = 3,       /* a system call failed; the message has errno text */
    ST_ERR_SHM_SPACE = 4, /* the shm filesystem has no room for the segments */
    ST_ERR_PEER_DEAD = 5, /* a peer process died, aborted the collective, or failed */
    ST_ERR_TIMEOUT = 6,   /* a peer did not make progress within the timeout */
    ST_ERR_EXISTS = 7,    /* a segment with our name already exists */
    ST_ERR_MISMATCH = 8,  /* peers disagree (world size, sizes, job) */
    ST_ERR_IO = 9,        /* reading or writing a file failed */
    ST_ERR_FORMAT = 10,   /* a file or text is malformed */
    ST_ERR_BACKEND = 11,  /* a backend library (oneDNN, hwloc) failed */
    ST_ERR_INTERRUPTED = 12 /* stopped on request (signal) */
} st_status;

/* Short constant name of a status, e.g. "peer-dead".  Never NULL. */
const char *st_status_str(st_status s);

/* The message of the last failure on this thread ("" if none).  The buffer
 * belongs to the library and is overwritten by the next failure. */
const char *st_last_error(void);

/* For library modules: record a formatted message and return `s`. */
st_status st_fail(st_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The current message kept across calls that may overwrite it (a
 * collective telling the peers, a teardown), then `s` with it again. */
typedef struct st_kept_error {
    char msg[512];
} st_kept_error;
void st_error_keep(st_kept_error *e);
st_status st_error_again(const st_kept_error *e, st_status s);


#ifdef __cplusplus
}
#endif
#endif
