/* shmrun's command line: the flags, their checks and the options they
 * make.  A bad flag is one line on stderr and exit 2 (shmrun is a program,
 * and its flags are read before anything is started); --help and --version
 * print and exit 0. */
#ifndef SHMRUN_OPTIONS_H
#define SHMRUN_OPTIONS_H

#include <stdbool.h>

#include "sweep_run.h"
#include "shmtrain/topo.h"

#define SHMRUN_VERSION "0.1.0"

/* Every pointer points into argv (or at a literal): nothing to free. */
struct shmrun_options {
    st_plan_request req;
    st_topo_kind topo_kind;
    const char *topo_arg;
    bool dry_run, json, tee_all, quiet, print_mpirun;
    const char *hosts;
    const char *job_id;
    const char *log_dir;
    int max_restarts;
    double grace_s, stall_timeout_s;
    const char *grace_arg, *stall_arg, *bind_arg, *report;
    char **argv;
    struct sweep_job sweep;
    bool sweeping;
};

struct shmrun_options shmrun_options_parse(int argc, char **argv);

#endif
