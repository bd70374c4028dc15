/* The launchers' placement variables: the input's lines are the values of
 * the variables below, in order (an empty line leaves one unset).  A
 * placement that is accepted describes a process that exists: its ranks
 * within its worlds, its node within the nodes. */
#define _GNU_SOURCE
#include <string.h>

#include "fuzz.h"
#include "shmtrain/env.h"

static const char *const NAMES[] = {
    ST_ENV_RANK, ST_ENV_WORLD_SIZE, ST_ENV_LOCAL_RANK, ST_ENV_LOCAL_WORLD_SIZE, ST_ENV_OMPI_RANK,
    ST_ENV_OMPI_WORLD_SIZE, ST_ENV_OMPI_LOCAL_RANK, ST_ENV_OMPI_LOCAL_SIZE, ST_ENV_SLURM_RANK,
    ST_ENV_SLURM_WORLD_SIZE, ST_ENV_SLURM_LOCAL_RANK, ST_ENV_SLURM_NODE, ST_ENV_SLURM_NODES,
    ST_ENV_SLURM_TASKS_PER_NODE, ST_ENV_GENERIC_RANK, ST_ENV_GENERIC_WORLD_SIZE, ST_ENV_GENERIC_LOCAL_RANK,
    ST_ENV_GENERIC_LOCAL_WORLD_SIZE, ST_ENV_TORCH_NODE, ST_ENV_NODE_SIZE};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    char *line = text;
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++) {
        char *nl = line ? strchr(line, '\n') : NULL;
        if (nl)
            *nl = '\0';
        if (line && *line)
            setenv(NAMES[i], line, 1);
        else
            unsetenv(NAMES[i]);
        line = nl ? nl + 1 : NULL;
    }
    st_placement p;
    if (st_placement_from_env(&p) == ST_OK) {
        fuzz_assert(p.world >= 1 && p.rank >= 0 && p.rank < p.world);
        fuzz_assert(p.local_world >= 1 && p.local_rank >= 0 && p.local_rank < p.local_world);
        fuzz_assert(p.local_world <= p.world);
        fuzz_assert(p.nodes < 0 || (p.node >= 0 && p.node < p.nodes));
    }
    free(text);
    return 0;
}
