/* Internal: causal attention of one head with its five matrix products as
 * oneDNN matmul primitives in bf16 (fp32 sums), the softmax and its
 * statistics in fp32 (seq_kernels.c's, as every attention path).
 *
 * The products are the ones causal_bf16.c computes with AVX512-BF16 dot
 * products; here oneDNN picks the kernel, so a CPU with AMX runs them on its
 * tiles (brg:avx512_core_amx) and one with AVX512-BF16 on brgemm's dot
 * products.  The rows go in stripes of `rows` (scores, softmax, P V and dS K
 * while a stripe is in cache), the stripe's scores, P, dP and dS held
 * transposed, keys by queries (onednn_causal.c says why); P and dS are kept
 * as bf16 in column blocks for dK = dS^T Q and dV = P^T dY.  Every operand
 * is dense or a dense one transposed (oneDNN 3.2's brgemm matmul takes no
 * other: a leading dimension past the row falls to gemm:jit at half the
 * rate), so the head's Q, K, V and dY are packed to bf16 first.  A
 * stripe's scores reach its last row's diagonal: the diagonal block's upper
 * half is computed and the softmax zeroes it.
 *
 * Sums run in oneDNN's order, fixed for a shape (each primitive is made for
 * one thread and runs on the calling one), so the same bits at any thread
 * count and in backward's P as in forward's; not causal_bf16.c's bits.
 * Tested against the reference backend (tests/test_attention_bf16.c).
 *
 * Ownership: dn_causal_create makes the primitives, their memory objects
 * and a stream for each of `threads` threads; dn_causal_destroy frees them.
 * The engine is borrowed and must outlive it.  The scratch is the caller's:
 * dn_causal_scratch_bytes for each thread, 64-byte aligned. */
#ifndef SHMTRAIN_NN_ONEDNN_CAUSAL_H
#define SHMTRAIN_NN_ONEDNN_CAUSAL_H

#include <dnnl.h>
#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/status.h"

typedef struct dn_causal dn_causal;

/* For heads of t rows and hs dimensions, in stripes of `rows` rows, run by
 * threads 0..threads-1 (omp_get_thread_num()). */
st_status dn_causal_create(dn_causal **out, dnnl_engine_t engine, long t, long hs, long rows, int threads);
void dn_causal_destroy(dn_causal *c);

/* Was it made for heads of t rows and hs dimensions? */
bool dn_causal_shape_is(const dn_causal *c, long t, long hs);
size_t dn_causal_scratch_bytes(const dn_causal *c);
/* oneDNN's kernels for the products, each named once ("brg:avx512_core_amx"). */
const char *dn_causal_impl(const dn_causal *c);
/* Is it one of oneDNN's reference (plain C++) kernels? */
bool dn_causal_is_reference(const dn_causal *c);

/* y = P V (rows of hs floats, ldy apart), P = causal softmax(Q K^T / sqrt(hs)),
 * Q, K, V the head's columns of qkv rows ld apart (ld = 3C); p: NULL or
 * t x t floats to keep P in (zeros right of the diagonal). */
st_status dn_causal_forward(const dn_causal *c, int thread, float *y, long ldy, float *p, const float *q, long ld,
                            void *scratch);
/* Given dy (ldy apart): P again (into p where not NULL), and dQ, dK, dV
 * into dq, dq + C, dq + 2C of the qkv gradient rows (ld apart, C = ld / 3). */
st_status dn_causal_backward(const dn_causal *c, int thread, float *dq, float *p, const float *dy, long ldy,
                             const float *q, long ld, void *scratch);

#endif
