/* The engine's choices, as data: every kernel pick, chunking, sequence
 * path, verbosity and test hook the oneDNN backend takes from its caller
 * (st_net_config.tuning).  All false is the engine as built and measured;
 * each switch turns one choice back to oneDNN's default or to the path it
 * replaced, for comparison (bench/st-step-ab) and for the tests that check
 * each against the default (test_switches).  A switch stays while its
 * verdict can differ by machine (kernels that AMX or another cache size may
 * reverse) or it leads to a bf16 path; one whose verdict the benchmarks
 * settled went (docs/benchmarks-history.md, section 2: the backward-only
 * chunking and the sequence inner product).
 *
 * Only main()s fill it from the environment, with st_nn_tuning_from_env
 * (src/nn/tuning.c; the names are env.h's); the library never reads the
 * environment for it. */
#ifndef SHMTRAIN_TUNING_H
#define SHMTRAIN_TUNING_H

#include <stdbool.h>
#include <stddef.h>

typedef struct st_nn_tuning {
    bool no_chunks;        /* no convolution computed in its max-pool's chunks (docs/engine.md) */
    bool brgconv;          /* let oneDNN pick its brgemm convolutions for few input channels */
    bool ip_any;           /* inner products choose their weights' layout */
    bool ip_plain;         /* bf16 inner products on plain weights where AMX and many rows make oneDNN's
                              blocked ones the default (onednn_weights.c) */
    bool reordered_copies; /* AMX's blocked bf16 weights reordered each step from a plain copy the optimizer
                              writes, instead of written by it in place (copy_layouts.c) */
    bool wgrad_ip;         /* bf16 linear layers' weight gradients from the inner product's backward-weights
                              where AMX and many rows make a matmul on the tiles the default (onednn_wgrad.c) */
    bool onednn_pool;      /* oneDNN's pooling instead of maxpool2.c */
    bool seq_tn;           /* their weight gradients from untransposed operands */
    bool onednn_layernorm; /* oneDNN's layer norm instead of the C rows */
    bool onednn_stem;      /* oneDNN's convolution for a one-channel stem instead of stem.c */
    bool unfused_loss;     /* a tied head's whole logits, then the loss over them, instead of the
                              two fused in chunks of rows (onednn_head.c) */
    bool attention_fp32;   /* attention's products in fp32 in a bf16 net (causal.c, not causal_bf16.c) */
    bool attention_matmul; /* attention's products as oneDNN matmul primitives (onednn_causal.c) where
                              the short-context kernel (causal_small.c) would run, and in a bf16 net without
                              AMX past T 256 (elsewhere they are the default past the short kernel) */
    bool attention_dot;    /* ... as causal_bf16.c's AVX512-BF16 dot products where the short-context
                              kernel or the matmul would run (the default only past T 256 without AMX) */
    bool attention_tiles;  /* fp32 attention's products in causal.c's tiles instead of the short-context
                              kernel (causal_small.c) or oneDNN's fp32 matmul primitives (onednn_causal.c) */
    bool verbose;          /* print every reorder, fallback and kernel the build chooses */
    bool bf16_any_isa;     /* bf16 layers take whatever kernel oneDNN has (its reference
                              ones without native bf16: tests/bf16_any_isa.c) */
} st_nn_tuning;

/* One switch: its environment name and its field, and whether it picks a
 * kernel the same numbers go through (the tuner may turn it on: st_nn_tune,
 * include/shmtrain/tune.h), or changes what is computed or said (fp32
 * attention in a bf16 net, verbosity, the test hook). */
typedef struct st_nn_switch {
    const char *env;       /* "SHMTRAIN_ONEDNN_NO_CHUNKS" */
    size_t offset;         /* offsetof(st_nn_tuning, no_chunks) */
    bool kernel;
} st_nn_switch;

/* Every switch, `*count` of them. */
const st_nn_switch *st_nn_switches(int *count);

/* Each switch whose variable is set (to anything but "" or "0"). */
void st_nn_tuning_from_env(st_nn_tuning *t);

/* Set the switch named `env` (st-step-ab's "NAME=1"); false if there is none. */
bool st_nn_tuning_set(st_nn_tuning *t, const char *env, bool on);

#endif
