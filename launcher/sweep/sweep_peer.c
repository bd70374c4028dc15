/* sweep_peer: which PyTorch peers a sweep can run.  See sweep_peer.h. */
#define _GNU_SOURCE
#include "sweep_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmtrain/env.h"

#ifndef SHMTRAIN_TORCH_VENV_PYTHON
#define SHMTRAIN_TORCH_VENV_PYTHON ""
#endif
#ifndef SHMTRAIN_TORCH_DDP_PATHS
#define SHMTRAIN_TORCH_DDP_PATHS ""
#endif

int sweep_run_quietly(char *const argv[], const char *dir, const char *log)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (dir && chdir(dir) != 0)
            _exit(126);
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *find_torch_script(const char *asked)
{
    static char found[1024];
    if (asked)
        return access(asked, R_OK) == 0 ? asked : NULL;
    const char *env = st_env_text(ST_ENV_TORCH_DDP);
    if (env)
        return access(env, R_OK) == 0 ? env : NULL;
    char paths[2048];
    snprintf(paths, sizeof paths, "%s", SHMTRAIN_TORCH_DDP_PATHS);
    char *save = NULL;
    for (char *p = strtok_r(paths, ":", &save); p; p = strtok_r(NULL, ":", &save))
        if (access(p, R_OK) == 0) {
            snprintf(found, sizeof found, "%s", p);
            return found;
        }
    return NULL;
}

/* The peer's interpreter: the user's, else the venv with PyTorch 2.13 that
 * scripts/install-deps.sh --bench makes in this tree, else the system's
 * (Debian's python3-torch belongs to /usr/bin/python3, which a virtualenv
 * or /usr/local python3 earlier in PATH would hide). */
static const char *python(void)
{
    const char *p = st_env_text(ST_ENV_PYTHON);
    if (p)
        return p;
    if (*SHMTRAIN_TORCH_VENV_PYTHON && access(SHMTRAIN_TORCH_VENV_PYTHON, X_OK) == 0)
        return SHMTRAIN_TORCH_VENV_PYTHON;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

static bool has_text_flag(char **argv)
{
    for (char **a = argv; a && *a; a++)
        if (!strcmp(*a, "--text") || !strncmp(*a, "--text=", 7))
            return true;
    return false;
}

/* A language model's job (it reads --text) is compared with the same GPT
 * in PyTorch, torch_gpt.py, which lives beside torch_ddp.py. */
static const char *peer_for_job(const struct sweep_job *j, const char *ddp_script)
{
    static char gpt[1100];
    if (j->torch_script || !has_text_flag(j->argv))
        return ddp_script;
    const char *slash = strrchr(ddp_script, '/');
    snprintf(gpt, sizeof gpt, "%.*storch_gpt.py", slash ? (int)(slash - ddp_script + 1) : 0, ddp_script);
    return access(gpt, R_OK) == 0 ? gpt : NULL;
}

/* Can the peer's Python import the shm backend?  Installed, or built beside
 * this shmrun (BUILD/shmrun, BUILD/python): then on PYTHONPATH for the runs. */
static bool shm_backend_importable(const char *py, const char *self)
{
    char *probe[] = {(char *)py, "-c", "import shmtrain_torch", NULL};
    if (sweep_run_quietly(probe, NULL, NULL) == 0)
        return true;
    char built[1200], path[2400];
    const char *slash = strrchr(self, '/');
    snprintf(built, sizeof built, "%.*s/python", slash ? (int)(slash - self) : 1, slash ? self : ".");
    snprintf(path, sizeof path, "%s/shmtrain_torch/__init__.py", built);
    if (access(path, R_OK) != 0)
        return false;
    const char *old = st_env_text("PYTHONPATH");
    snprintf(path, sizeof path, "%s%s%s", built, old && *old ? ":" : "", old && *old ? old : "");
    return setenv("PYTHONPATH", path, 1) == 0 && sweep_run_quietly(probe, NULL, NULL) == 0;
}

/* A script's runs: over shm (the job's system), and over gloo (the peer
 * system's) with --compare-backends shm,gloo.  Its interpreter must import
 * shmtrain_torch, which replaces the script's backend (the entry point). */
static void script_systems(const struct sweep_job *j, const char *self, struct sweep_peers *out)
{
    const char *program = strrchr(j->argv[0], '/') ? strrchr(j->argv[0], '/') + 1 : j->argv[0];
    out->python = !strncmp(program, "python", 6) ? j->argv[0] : python();
    out->nsystems = j->compare_gloo ? 2 : 1;
    if (!shm_backend_importable(out->python, self)) {
        fprintf(stderr, "shmrun: --sweep: %s cannot import shmtrain_torch (make python installs it): the script's "
                        "runs over shm will fail\n", out->python);
        return;
    }
    /* the script imports torch, not shmtrain_torch: only the installed entry point brings the backend in */
    char *registers[] = {(char *)out->python, "-c",
                         "import sys, torch.distributed as d; sys.exit('shm' not in d.Backend.backend_list)", NULL};
    if (sweep_run_quietly(registers, NULL, NULL) != 0)
        fprintf(stderr, "shmrun: --sweep: %s imports shmtrain_torch but `import torch` does not load it (its entry "
                        "point is not installed: pip install ./python): a script that does not import it runs over "
                        "its own backend, and its runs over shm are refused\n", out->python);
}

void sweep_find_peers(const struct sweep_job *j, const char *self, struct sweep_peers *out)
{
    *out = (struct sweep_peers){NULL, python(), 1};
    if (j->script) {
        script_systems(j, self, out);
        return;
    }
    if (!j->compare_torch)
        return;
    const char *script = find_torch_script(j->torch_script);
    if (script)
        script = peer_for_job(j, script);
    if (!script) {
        fprintf(stderr, "shmrun: --compare-torch: %s; running shmtrain only\n",
                j->torch_script ? "that script cannot be read" : "bench/torch_ddp.py (or torch_gpt.py) not found (set SHMTRAIN_TORCH_DDP)");
        return;
    }
    char *probe[] = {(char *)out->python, "-c", "import torch", NULL};
    if (sweep_run_quietly(probe, NULL, NULL) != 0) {
        fprintf(stderr, "shmrun: --compare-torch: %s cannot import torch (scripts/install-deps.sh --bench installs it); "
                        "running shmtrain only\n", out->python);
        return;
    }
    out->script = script;
    out->nsystems = 2;
    if (j->torch_script)  /* a script of the user's own may not take --backend */
        fprintf(stderr, "shmrun: --compare-torch=%s: DDP over gloo only (DDP over shm runs with bench/torch_ddp.py)\n",
                j->torch_script);
    else if (shm_backend_importable(out->python, self))
        out->nsystems = 3;
    else
        fprintf(stderr, "shmrun: --compare-torch: %s cannot import shmtrain_torch (make python installs it); "
                        "DDP over gloo only\n", out->python);
}
