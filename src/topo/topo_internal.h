/* Internal: what the topology reader (topo.c) and the planner (plan.c)
 * share. */
#ifndef SHMTRAIN_TOPO_INTERNAL_H
#define SHMTRAIN_TOPO_INTERNAL_H

#include <hwloc.h>
#include <stdbool.h>

#include "shmtrain/topo.h"

struct st_topo {
    hwloc_topology_t h;
    hwloc_bitmap_t allowed;  /* PUs this process may use */
    bool this_system;
    char summary[256];
};

/* ------------------------------------------------------------ topology -- */

/* hwloc's count of objects of a type (0 when it has none). */
int topo_count_type(hwloc_topology_t h, hwloc_obj_type_t type);

#endif
