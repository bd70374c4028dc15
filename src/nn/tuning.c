/* The engine's switches (tuning.h) by their environment names (env.h):
 * the engine owns st_nn_tuning and this table of it; env.c only reads a
 * variable. */
#include "shmtrain/tuning.h"
#include "shmtrain/env.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define SWITCH(NAME, field) {ST_ENV_##NAME, offsetof(st_nn_tuning, field)}
static const st_nn_switch SWITCHES[] = {
    SWITCH(ONEDNN_NO_CHUNKS, no_chunks),
    SWITCH(ONEDNN_BRGCONV, brgconv),     SWITCH(ONEDNN_IP_ANY, ip_any),
    SWITCH(ONEDNN_IP_PLAIN, ip_plain),   SWITCH(ONEDNN_WGRAD_IP, wgrad_ip),
    SWITCH(ONEDNN_REORDERED_COPIES, reordered_copies),
    SWITCH(ONEDNN_POOL, onednn_pool),       SWITCH(ONEDNN_STEM, onednn_stem),
    SWITCH(ONEDNN_SEQ_TN, seq_tn),       SWITCH(ONEDNN_LAYERNORM, onednn_layernorm),
    SWITCH(ONEDNN_UNFUSED_LOSS, unfused_loss), SWITCH(ATTENTION_FP32, attention_fp32),
    SWITCH(ATTENTION_MATMUL, attention_matmul), SWITCH(ATTENTION_DOT, attention_dot),
    SWITCH(ATTENTION_TILES, attention_tiles),
    SWITCH(NN_VERBOSE, verbose),         SWITCH(BF16_ANY_ISA, bf16_any_isa),
};
#undef SWITCH

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
