/* sweep_peer: the PyTorch peers a sweep runs beside shmtrain
 * (shmrun --sweep --compare-torch), and how to run a helper program quietly.
 *
 * Three systems at most (sweep.h's enum sweep_system): shmtrain; PyTorch DDP
 * over gloo, as its users run it today; and PyTorch DDP over shmtrain's own
 * all-reduce, the "shm" backend of python/shmtrain_torch.  The third runs
 * only with the project's peer scripts (bench/torch_ddp.py, torch_gpt.py:
 * they take --backend) and where the peer's Python imports shmtrain_torch,
 * installed (make python) or built beside this shmrun (BUILD/python, which
 * is then put on PYTHONPATH for the runs).
 */
#ifndef SHMRUN_SWEEP_PEER_H
#define SHMRUN_SWEEP_PEER_H

#include "sweep_run.h"

struct sweep_peers {
    const char *script;   /* the peer's training script; NULL: shmtrain alone */
    const char *python;   /* its interpreter */
    int nsystems;         /* 1: shmtrain; 2: + DDP over gloo; 3: + DDP over shm */
};

/* What this job can be compared with; a line on stderr for each peer that
 * was asked for and cannot run.  `self`: this shmrun's path. */
void sweep_find_peers(const struct sweep_job *j, const char *self, struct sweep_peers *out);

/* Run argv (searched in PATH) in `dir` (NULL: here) with its output in
 * `log` (relative to dir; NULL: /dev/null); its exit status, or -1. */
int sweep_run_quietly(char *const argv[], const char *dir, const char *log);

#endif
