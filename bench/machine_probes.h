/* The machine's limits the all-reduce bench states its figures against
 * (bench/allreduce_bench.c): the one-way time of a cache line between two
 * ranks' cores, copy bandwidth, and how fast a rank reads what a peer core
 * just wrote.  Every rank of the group calls each probe (they synchronise);
 * each returns the figure every rank agrees on, or a negative number when
 * the group failed (st_last_error says why). */
#ifndef ST_BENCH_MACHINE_PROBES_H
#define ST_BENCH_MACHINE_PROBES_H

#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/coll.h"

/* Ranks 0 and 1 bounce a round number through the first line of their
 * zero-copy regions (`mine`, rank 0's and 1's own): nanoseconds one way. */
double probe_oneway_ns(st_group *g, void *mine);

/* Bytes read + written a second (GB/s): rank 0's first core alone
 * (`alone`), or every rank with all its threads at once, each thread
 * copying `per_thread` bytes of its own, past the caches. */
double probe_copy_gbs(st_group *g, size_t per_thread, bool alone);

/* Each rank writes `bytes` of its zero-copy region `mine`, its right
 * neighbour sums them: GB/s read, the mean over the ranks. */
double probe_cross_read_gbs(st_group *g, void *mine, size_t bytes);

#endif
