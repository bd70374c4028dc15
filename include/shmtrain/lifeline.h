/* An instance lives and dies with its launcher.
 *
 * A launcher killed by SIGKILL (the OOM killer, `timeout -s KILL`, a CI
 * runner's cancellation) cannot stop its gang; without this the instances
 * train on, holding their cores, writing checkpoints nobody collects.  Two
 * ways to learn of the death, both ending in st_lifeline_leave:
 *
 *  - shmrun sets PR_SET_PDEATHSIG (SIGTERM) in each child before exec and
 *    names itself in SHMTRAIN_LAUNCHER_PID; the SIGTERM then arrives at
 *    once, and the instance tells it from a forwarded Ctrl-C by its parent
 *    no longer being that pid.
 *  - Under another launcher (mpirun, srun, torchrun: a parent that sets no
 *    death signal), the parent the process started with is polled: its
 *    death re-parents the process, which getppid() shows.
 *
 * A process that no launcher started (a user's shell, nohup) has no
 * lifeline: its shell may go away and the run must not.
 */
#ifndef SHMTRAIN_LIFELINE_H
#define SHMTRAIN_LIFELINE_H

#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How often the parent is polled where no death signal comes (ms). */
#define ST_LIFELINE_POLL_MS 100

/* The launcher to die with: SHMTRAIN_LAUNCHER_PID under shmrun; the parent
 * under mpirun, srun or torchrun (a launcher's rank variables set); 0 for
 * none.  Read once, before any thread starts. */
pid_t st_lifeline_launcher(void);

/* Has `launcher` (non-zero) gone?  The parent is not it any more. */
bool st_lifeline_broken(pid_t launcher);

/* Leave now, the launcher gone: a checkpoint being written is dropped (the
 * previous one stays whole), the job's names leave /dev/shm, one line goes
 * to stderr, and the process exits ST_EXIT_LAUNCHER_GONE without running
 * atexit handlers or waiting for any peer. */
_Noreturn void st_lifeline_leave(pid_t launcher);

#ifdef __cplusplus
}
#endif
#endif
