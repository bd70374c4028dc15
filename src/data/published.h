/* Internal: a read-only object published once per machine in /dev/shm, the
 * way the image sets (data.c) and the token streams (text.c) are shared.
 *
 * The publisher creates the name (O_CREAT|O_EXCL, mode 0600), allocates its
 * pages (posix_fallocate: a full /dev/shm is an error now, not a SIGBUS
 * later), fills the mapping after its first 8 bytes, and seals it: the
 * magic in those 8 bytes last, then read-only.  Attachers map it read-only
 * after checking its owner is this user and its magic is the kind they
 * expect (a half-written object has none).  The caller owns the mapping
 * (munmap) and removes the name once every peer has attached. */
#ifndef SHMTRAIN_DATA_PUBLISHED_H
#define SHMTRAIN_DATA_PUBLISHED_H

#include <stddef.h>
#include <stdint.h>

#include "shmtrain/status.h"

/* Create and map `name` read-write, `bytes` long.  `what` names the object
 * in messages ("dataset", "text").  On failure nothing is left behind. */
st_status published_create(const char *name, size_t bytes, const char *what, void **map);

/* Filled: `magic` into its first 8 bytes, last, and from now on read-only.
 * On failure the mapping and the name are gone. */
st_status published_seal(const char *name, void *map, size_t bytes, uint64_t magic);

/* Map a published object read-only: ours, at least `min_bytes` long, and
 * sealed with `magic` (else ST_ERR_FORMAT, nothing left mapped). */
st_status published_attach(const char *name, size_t min_bytes, const char *what, uint64_t magic, void **map,
                           size_t *bytes);

#endif
