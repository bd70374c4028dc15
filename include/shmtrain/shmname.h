/* The name of every shared-memory object shmtrain creates, in one place:
 *
 *   /shmtrain.<uid>.<job id>.<what>
 *
 * <what> is a rank's collective segment ("0", "1", ...) or a shared dataset
 * ("data-train", "data-test").  The uid keeps users apart, the job id jobs;
 * the launcher removes every name with a job's prefix after each attempt
 * (st_segment_cleanup), so whatever a job names this way cannot leak.
 * libc only: coll, data and the trainer all use it.
 */
#ifndef SHMTRAIN_SHMNAME_H
#define SHMTRAIN_SHMNAME_H

#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_SHM_DIR "/dev/shm"
#define ST_SHM_NAME_MAX 128

#define ST_JOB_ID_MAX 64

/* Is `job_id` usable in a name ([A-Za-z0-9_.-]{1,ST_JOB_ID_MAX})? */
bool st_job_id_valid(const char *job_id);

/* "/shmtrain.<uid>.<job_id>.<what>" into name (ST_SHM_NAME_MAX is enough);
 * fails on a bad job id or a `what` that is empty or holds a '/'. */
st_status st_shm_name(char *name, size_t len, const char *job_id, const char *what);

/* "shmtrain.<uid>.<job_id>." : the prefix every name of the job starts with
 * in ST_SHM_DIR (no leading slash). */
st_status st_shm_prefix(char *prefix, size_t len, const char *job_id);

/* Create the object `name` and open it read-write: O_CREAT | O_EXCL and
 * mode 0600 (never an object someone else made, never readable by another
 * user).  -1 with shm_open's errno, or ECANCELED once st_shm_stop_creating
 * has run. */
int st_shm_create(const char *name);

/* From any thread, as the process leaves without its usual cleanup (its
 * launcher died): no name is created once this returns, and a creation in
 * flight in another thread has finished, so a removal of the job's names
 * after it misses none. */
void st_shm_stop_creating(void);

#ifdef __cplusplus
}
#endif
#endif
