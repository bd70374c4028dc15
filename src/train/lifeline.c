/* The instance's lifeline to its launcher (include/shmtrain/lifeline.h). */
#define _GNU_SOURCE
#include "shmtrain/lifeline.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmtrain/ckpt.h"
#include "shmtrain/coll.h"
#include "shmtrain/env.h"
#include "shmtrain/shmname.h"

pid_t st_lifeline_launcher(void)
{
    if (st_env_set(ST_ENV_LAUNCHER_PID)) {
        /* Not a pid: watch nothing rather than something wrong; the
         * launcher is shmrun, whose death signal still comes. */
        int pid = 0;
        return st_env_int(ST_ENV_LAUNCHER_PID, 2, &pid) ? (pid_t)pid : 0;
    }
    return st_env_other_launcher() ? getppid() : 0;
}

bool st_lifeline_broken(pid_t launcher) { return launcher > 0 && getppid() != launcher; }

_Noreturn void st_lifeline_leave(pid_t launcher)
{
    st_shm_stop_creating();  /* before the removal: a rank joining right now must not add a name after it */
    st_ckpt_abandon_write();
    const char *job = st_env_text(ST_ENV_JOB_ID);
    int world = 1;
    if (job && st_env_int(ST_ENV_WORLD_SIZE, 1, &world))
        st_segment_cleanup(job, world);
    /* stderr may be a pipe to the dead launcher: EPIPE, not SIGPIPE. */
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, NULL);
    const char *rank = st_env_text(ST_ENV_RANK);
    char line[160];
    const int n = snprintf(line, sizeof line, "shmtrain%s%s: the launcher (pid %d) is gone: leaving without a "
                                              "checkpoint\n", rank ? " rank " : "", rank ? rank : "", (int)launcher);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
        /* nobody to tell */
    }
    _exit(ST_EXIT_LAUNCHER_GONE);
}
