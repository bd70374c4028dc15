/* shmrun --print-mpirun: the mpirun command (and rankfile) that reproduce
 * shmrun's hwloc plan on every node of a list of nodes of the same shape,
 * for clusters that launch with mpirun. */
#ifndef SHMRUN_MPIRUN_CMD_H
#define SHMRUN_MPIRUN_CMD_H

#include <stdio.h>

#include "shmtrain/topo.h"

/* Is `hosts` a usable list ("h1,h2", names of [A-Za-z0-9._-])?  Returns
 * the host count, or 0. */
int mpirun_hosts_count(const char *hosts);

/* Print to f: a comment, the mpirun command with --map-by (when every
 * instance has the same cores), the one with a rankfile of the plan's PUs,
 * and the rankfile.  argv (may be NULL) is the program and its arguments. */
void mpirun_print(FILE *f, const st_plan *p, const char *hosts, char *const *argv);

#endif
