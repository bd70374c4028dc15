/* Internal: one POSIX shared-memory segment of the collectives.
 *
 * A segment is created by its owner rank (O_CREAT|O_EXCL, 0600, allocated
 * with posix_fallocate so a full /dev/shm is an error here rather than a
 * SIGBUS later) and attached by the peers.  The name carries the uid and the
 * job id, so two users or two jobs never meet.
 */
#ifndef SHMTRAIN_COLL_SEGMENT_H
#define SHMTRAIN_COLL_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmtrain/shmname.h"
#include "shmtrain/status.h"

#define ST_SEGMENT_NAME_MAX ST_SHM_NAME_MAX

struct st_segment {
    void *base;          /* mapping, or NULL */
    size_t bytes;
    char name[ST_SEGMENT_NAME_MAX];  /* "/shmtrain.<uid>.<job>.<rank>" */
    bool linked;         /* we created it and have not unlinked it yet */
};

/* Fail with ST_ERR_SHM_SPACE unless the shm filesystem has `need` bytes
 * free (or `limit`, when non-zero, pretends it has only that much). */
st_status st_shm_space_check(size_t need, size_t limit, int world, size_t per_rank);

/* Create and map a new segment of `bytes` (zero-filled). */
st_status st_segment_create(struct st_segment *s, const char *name, size_t bytes);

/* What a segment's owner writes at its start, so an attacher can tell a
 * peer's segment from a file something else left under the name. */
struct st_segment_mark {
    uint64_t magic;
    size_t offset;       /* of the 64-bit magic, inside the first page */
};

/* Try once to open and map the peer segment `name` of exactly `bytes`.
 * Returns ST_OK, ST_ERR_EXISTS meaning "not there yet, try again", or an
 * error (wrong owner or mode; a size that differs, telling a peer started
 * with other sizes from a foreign file by `mark`; a file without the mark
 * is given two seconds from its last change to get one). */
st_status st_segment_attach(struct st_segment *s, const char *name, size_t bytes, struct st_segment_mark mark);

/* Remove the name (the mapping stays valid).  Idempotent. */
void st_segment_unlink(struct st_segment *s);

/* Unmap; unlinks first if we still own the name. */
void st_segment_close(struct st_segment *s);

#endif
