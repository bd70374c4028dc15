/* Internal: a read-only object published once per machine in /dev/shm, the
 * way the image sets (data.c) and the token streams (text.c) are shared.
 *
 * The publisher creates the name (O_CREAT|O_EXCL, mode 0600), allocates its
 * pages (posix_fallocate: a full /dev/shm is an error now, not a SIGBUS
 * later), fills the mapping, writes its header's magic last, and makes the
 * mapping read-only; attachers map it read-only after checking its owner is
 * this user.  The caller owns the mapping (munmap) and removes the name
 * once every peer has attached. */
#ifndef SHMTRAIN_DATA_PUBLISHED_H
#define SHMTRAIN_DATA_PUBLISHED_H

#include <stddef.h>

#include "shmtrain/status.h"

/* Create and map `name` read-write, `bytes` long.  `what` names the object
 * in messages ("dataset", "text").  On failure nothing is left behind. */
st_status published_create(const char *name, size_t bytes, const char *what, void **map);

/* Filled: from now on read-only. */
st_status published_seal(const char *name, void *map, size_t bytes);

/* Map a published object read-only: ours, at least `min_bytes` long. */
st_status published_attach(const char *name, size_t min_bytes, const char *what, void **map, size_t *bytes);

#endif
