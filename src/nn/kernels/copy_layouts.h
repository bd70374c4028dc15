/* Internal: writing a weight copy (st_weight_copy) from its fp32 master, in
 * whichever layout it has: the optimizer's update pass writes each chunk's
 * part as it leaves the cache, the net writes whole copies after someone
 * changed the parameters.  One function per layout, chosen in one place
 * (copy_layouts.c's table). */
#ifndef SHMTRAIN_NN_COPY_LAYOUTS_H
#define SHMTRAIN_NN_COPY_LAYOUTS_H

#include <stddef.h>

#include "shmtrain/optim.h"

/* The copy's elements [from, to) (counted from c->offset) from master, the
 * copy's first parameter: each rounded to c->type as st_bf16_from_f32 and
 * st_f16_from_f32 round it, so any split of a copy into ranges, on any
 * threads, writes the same words. */
void nn_copy_write(const st_weight_copy *c, const float *master, size_t from, size_t to);

/* The elements a range should begin and end on (counted from the copy's
 * first) for its writes to fill whole cache lines: 64 rows of a pair
 * layout (a range cutting a group of rows writes them element by element,
 * a part of each line); 1 where any range does. */
size_t nn_copy_unit(const st_weight_copy *c);

#endif
