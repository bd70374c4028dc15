/* Internal: causal attention of one head with its five matrix products as
 * oneDNN matmul primitives in bf16 or in fp32 (fp32 sums), the softmax and
 * its statistics in fp32 (seq_kernels.c's, as every attention path).
 *
 * The bf16 products are the ones causal_bf16.c computes with AVX512-BF16
 * dot products, the fp32 ones causal.c's; here oneDNN picks the kernel, so
 * a CPU with AMX runs bf16 on its tiles (brg:avx512_core_amx), one with
 * AVX512-BF16 on brgemm's dot products, and fp32 runs on brgemm's FMAs
 * (brg:avx512_core; gemm:jit under AVX2).  The rows go in stripes of `rows` (scores, softmax, P V and dS K
 * while a stripe is in cache), the stripe's scores, P, dP and dS held
 * transposed, keys by queries (onednn_causal.c says why); dK and dV gather
 * a stripe's terms at a time.  Every operand is dense or a dense one
 * transposed (oneDNN 3.2's brgemm matmul takes no other: a leading
 * dimension past the row falls to gemm:jit at half the rate), so the
 * head's Q, K, V and dY are packed first, in the operands' type.  A
 * stripe's scores reach its last row's diagonal: the diagonal block's
 * upper half is computed and the softmax zeroes it.  The forward pass leaves each query's softmax
 * statistics (its max and its sum's reciprocal) with the caller, and the
 * backward pass makes P again from them.
 *
 * Sums run in oneDNN's order, fixed for a shape (each primitive is made for
 * one thread and runs on the calling one), so the same bits at any thread
 * count and in backward's P as in forward's; not causal_bf16.c's or
 * causal.c's bits.
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

#include "shmtrain/dtype.h"
#include "shmtrain/status.h"

typedef struct dn_causal dn_causal;

/* For heads of t rows and hs dimensions, in stripes of `rows` rows, run by
 * threads 0..threads-1 (omp_get_thread_num()); the products' operands fp32
 * where f32 (P and dS kept in fp32), else bf16. */
st_status dn_causal_create(dn_causal **out, dnnl_engine_t engine, long t, long hs, long rows, int threads, bool f32);
void dn_causal_destroy(dn_causal *c);

/* Was it made for heads of t rows and hs dimensions, on fp32 operands where f32? */
bool dn_causal_fits(const dn_causal *c, long t, long hs, bool f32);
size_t dn_causal_scratch_bytes(const dn_causal *c);
/* oneDNN's kernels for the products, each named once ("brg:avx512_core_amx"). */
const char *dn_causal_impl(const dn_causal *c);
/* Is it one of oneDNN's reference (plain C++) kernels? */
bool dn_causal_is_reference(const dn_causal *c);

/* A head's rows in a layer's matrix: its first element, the elements from
 * one row to the next, and their type, the edge's (fp32 or bf16: a bf16
 * edge is read as it is and written rounded once, from the products' fp32
 * sums, so it holds what an fp32 edge rounded by its reader would). */
typedef struct {
    void *at;  /* read only where an input */
    long ld;
    st_dtype type;  /* ST_DTYPE_F32 or ST_DTYPE_BF16 */
} dn_rows;

/* Element (row, col) of r. */
static inline void *dn_rows_at(dn_rows r, long row, long col)
{
    return (char *)r.at + (row * r.ld + col) * (r.type == ST_DTYPE_BF16 ? 2 : 4);
}

/* y = P V (rows of hs), P = causal softmax(Q K^T / sqrt(hs)), Q, K, V the
 * head's columns of the qkv rows (K C, V 2C further, qkv.ld = 3C); p: NULL
 * or t x t floats to keep P in (zeros right of the diagonal); stats: 2t
 * floats, each query's max then its sum's reciprocal, for the backward. */
st_status dn_causal_forward(const dn_causal *c, int thread, dn_rows y, float *p, dn_rows qkv, float *stats,
                            void *scratch);
/* Given dy and the head's forward statistics: P again (into p where not
 * NULL), and dQ, dK, dV into the head's columns of the qkv gradient rows
 * (0, C and 2C on, dqkv.ld = qkv.ld). */
st_status dn_causal_backward(const dn_causal *c, int thread, dn_rows dqkv, float *p, dn_rows dy, dn_rows qkv,
                             const float *stats, void *scratch);

#endif
