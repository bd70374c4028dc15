/* The engine's switches (tuning.h) by their environment names (env.h):
 * the engine owns st_nn_tuning and this table of it; env.c only reads a
 * variable. */
#include "shmtrain/tuning.h"
#include "shmtrain/env.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define KERNEL(NAME, field) {ST_ENV_##NAME, offsetof(st_nn_tuning, field), true}
#define OTHER(NAME, field) {ST_ENV_##NAME, offsetof(st_nn_tuning, field), false}
static const st_nn_switch SWITCHES[] = {
    KERNEL(ONEDNN_NO_CHUNKS, no_chunks),
    KERNEL(ONEDNN_BRGCONV, brgconv),     KERNEL(ONEDNN_IP_ANY, ip_any),
    KERNEL(ONEDNN_IP_PLAIN, ip_plain),   KERNEL(ONEDNN_WGRAD_IP, wgrad_ip),
    KERNEL(ONEDNN_REORDERED_COPIES, reordered_copies),
    KERNEL(ONEDNN_POOL, onednn_pool),       KERNEL(ONEDNN_STEM, onednn_stem),
    KERNEL(ONEDNN_SEQ_TN, seq_tn),       KERNEL(ONEDNN_LAYERNORM, onednn_layernorm),
    KERNEL(ONEDNN_UNFUSED_LOSS, unfused_loss), OTHER(ATTENTION_FP32, attention_fp32),
    KERNEL(ATTENTION_MATMUL, attention_matmul), KERNEL(ATTENTION_DOT, attention_dot),
    KERNEL(ATTENTION_TILES, attention_tiles),
    OTHER(NN_VERBOSE, verbose),          OTHER(BF16_ANY_ISA, bf16_any_isa),
};
#undef KERNEL
#undef OTHER

const st_nn_switch *st_nn_switches(int *count)
{
    *count = (int)(sizeof SWITCHES / sizeof *SWITCHES);
    return SWITCHES;
}

void st_nn_tuning_from_env(st_nn_tuning *t)
{
    *t = (st_nn_tuning){0};
    for (size_t i = 0; i < sizeof SWITCHES / sizeof *SWITCHES; i++)
        *(bool *)((char *)t + SWITCHES[i].offset) = st_env_flag(SWITCHES[i].env);
}

bool st_nn_tuning_set(st_nn_tuning *t, const char *env, bool on)
{
    for (size_t i = 0; i < sizeof SWITCHES / sizeof *SWITCHES; i++)
        if (!strcmp(SWITCHES[i].env, env)) {
            *(bool *)((char *)t + SWITCHES[i].offset) = on;
            return true;
        }
    return false;
}
