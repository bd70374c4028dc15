/* sweep_output: what a finished sweep leaves in --sweep-out (report.md,
 * runs.csv, sweep.json, the plots' data, gnuplot script and SVGs), and the
 * machine's description the report carries.  sweep_run.c runs the sweep;
 * the writers of each format are sweep.h's (pure: they take a FILE *). */
#ifndef SHMRUN_SWEEP_OUTPUT_H
#define SHMRUN_SWEEP_OUTPUT_H

#include "shmtrain/topo.h"
#include "sweep.h"
#include "sweep_run.h"

/* The machine, the date, the versions and the job's repeats and target. */
void sweep_describe_machine(struct sweep_report *rep, const st_topo *t, const struct sweep_job *j);

/* Every file from the runs so far (the plots drawn where gnuplot is), and
 * the report printed on stdout.  Returns 0, or -1 after a line on stderr
 * naming a file that could not be written. */
int sweep_write_outputs(const struct sweep_job *j, struct sweep_report *rep, const struct sweep_setting *s, int ns,
                        const struct sweep_run *runs, int nruns);

#endif
