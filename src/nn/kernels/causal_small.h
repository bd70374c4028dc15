/* Internal: causal attention of one sample's head with a short context,
 * fp32, in AVX-512 registers: the scores of six queries at a time, their
 * softmax and their mix with V in one pass over the rows, Q, K, V and dY
 * read where they lie in the layer's rows (no head packed), each
 * query's softmax max and sum's reciprocal kept for the backward pass, which
 * makes P from them again (the same operations on the same scores, so the
 * same bits).
 *
 * Why a kernel of its own: gpt-mini's heads (T 64, 32 dimensions) are too
 * small for oneDNN's matmul (two primitive calls and five packing copies a
 * head: 12 us of a forward pass for 0.26 MFLOP, a fifth of the core's matmul
 * rate, attention a seventh of the step on a Zen 4 core; docs/benchmarks.md
 * 0zb) and causal.c's portable tiles spend a quarter of theirs in a scalar
 * softmax's row remainders.
 *
 * Every sum runs in a fixed order (a score over the head's dimensions in
 * order, a row's max and sum as _mm512_reduce_*'s tree over lanes that each
 * ran down the row's vectors in order, the products over keys or queries in
 * order), so a result is the same at any thread count.  Tested against the
 * reference backend (tests/test_attention_fp32.c). */
#ifndef SHMTRAIN_NN_CAUSAL_SMALL_H
#define SHMTRAIN_NN_CAUSAL_SMALL_H

#include <stdbool.h>
#include <stddef.h>

/* The longest context it takes: its scratch holds P and dS whole (t x t
 * floats each, 0.5 MB at 256) and it computes the diagonal's tiles whole. */
#define CAUSAL_SMALL_MAX_T 256

/* Whether this CPU runs it (AVX-512F) and the head fits: head size a
 * multiple of 16 up to 64, 1 <= t <= CAUSAL_SMALL_MAX_T. */
bool causal_small_fits(long t, long hs);

/* What the products take: fp32's P and dS as computed (an fp32 net's), or
 * rounded to bf16 values (ties to even) before their products, as a bf16
 * net's attention defines (ref_seq.c): the caller hands Q, K, V and dY as
 * bf16 values in fp32, so each product is of two bf16 values, exact in
 * fp32, summed in fp32 as causal_bf16.c's dot products sum them. */
enum causal_small_operands { CAUSAL_SMALL_FP32, CAUSAL_SMALL_BF16 };

/* The scratch one head needs (a thread's, 64-byte aligned). */
size_t causal_small_scratch_bytes(long t, long hs);

/* y's rows (ldy floats apart) = softmax(Q K^T / sqrt(hs), causal) V.  q, k
 * and v: the head's t rows, ld floats apart.  stats: 2t floats, each query's
 * softmax max, then each one's reciprocal of its sum. */
void causal_small_forward(float *y, long ldy, const float *q, const float *k, const float *v, long ld, long t, long hs,
                          float *stats, void *scratch, enum causal_small_operands operands);

/* The gradients of q, k and v into dq, dk and dv (rows lddq floats apart)
 * from dy's (lddy apart) and the forward pass's statistics. */
void causal_small_backward(float *dq, float *dk, float *dv, long lddq, const float *dy, long lddy, const float *q,
                           const float *k, const float *v, long ld, long t, long hs, const float *stats,
                           void *scratch, enum causal_small_operands operands);

#endif
