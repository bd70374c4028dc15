/* Internal: causal attention of one sample's one head with its five matrix
 * products in bf16 (AVX512-BF16's dot products of pairs, fp32 sums), the
 * softmax and its statistics in fp32 (seq_kernels.c's, as in fp32).
 *
 * The fp32 path (causal.h) and this one compute the same thing; this one
 * rounds the products' operands (Q, K, V, P, dY, dS) to bf16 as PyTorch's
 * autocast does for SDPA, and halves the multiply-add instructions: a
 * vdpbf16ps does 32 multiply-adds where a vfmadd231ps does 16.  Only the
 * lower triangle's tiles are computed, as in causal.c.
 *
 * Matrices are row-major with a leading dimension in floats; Q, K and V are
 * the head's columns of the [t, 3C] qkv rows (ld = 3C).  Every sum runs in
 * a fixed order: the same bits at any thread count, and the backward pass's
 * P (computed again) equal to the forward's.  Tested against the reference
 * backend through the attention layer (tests/test_gpt.c). */
#ifndef SHMTRAIN_NN_CAUSAL_BF16_H
#define SHMTRAIN_NN_CAUSAL_BF16_H

#include <stdbool.h>
#include <stddef.h>

/* Does this CPU have the instruction (AVX512-BF16)?  Without it attention
 * stays fp32 in a bf16 net. */
bool causal_bf16_available(void);

/* Bytes of scratch one head needs (one per thread), 64-byte aligned by the caller. */
size_t causal_bf16_scratch_bytes(long t, long hs);

/* y = P V (rows of hs floats, ldy apart), P = causal softmax(Q K^T / sqrt(hs)).
 * p: NULL, or t x t floats to keep P in (zeros right of the diagonal; the
 * kernel itself holds no more of P than a stripe of rows). */
void causal_bf16_forward(float *y, long ldy, float *p, const float *q, long ld, long t, long hs, void *scratch);

/* The backward pass given dy (ldy apart): P again (into p where not NULL,
 * as the forward's), and dQ, dK, dV into dq, dq + C, dq + 2C of the qkv
 * gradient rows (ld apart, C = ld / 3). */
void causal_bf16_backward(float *dq, float *p, const float *dy, long ldy, const float *q, long ld, long t, long hs,
                          void *scratch);

#endif
