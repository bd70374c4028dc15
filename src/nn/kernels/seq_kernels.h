/* Internal: the sequence layers' row and element kernels (layer norm, GELU,
 * the causal softmax) over plain row-major tensors, OpenMP-parallel where
 * they take whole tensors, vectorised through ST_MULTIVERSION clones.
 *
 * They are the oneDNN backend's own (onednn_seq.c calls them) and stand
 * alone so that a benchmark can time them beside oneDNN's primitives for
 * the same work (bench/st-op-candidates).  Every sum over rows that becomes
 * a parameter gradient runs in a fixed order for a fixed thread count, so a
 * run repeats bitwise.  Tested against ref_seq.c (tests/test_gpt.c). */
#ifndef SHMTRAIN_NN_SEQ_KERNELS_H
#define SHMTRAIN_NN_SEQ_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/bf16.h"

/* y = (x - mean) / sqrt(var + 1e-5) * g + b over each row of x [rows, c];
 * each row's mean and 1 / std go to stats (2 floats a row). */
void seq_ln_fwd(float *y, float *stats, const float *x, const float *g, const float *b, long rows, long c);

/* Its backward from dy: dx (NULL: not wanted), dg and db (overwritten),
 * summed over rows per thread in `partial` and then over threads in thread
 * order.  partial holds seq_ln_partial_floats(c) floats. */
void seq_ln_bwd(float *dx, float *dg, float *db, float *partial, const float *x, const float *dy, const float *g,
                const float *stats, long rows, long c);
size_t seq_ln_partial_floats(long c);

/* The same with the output and its gradient in bf16 (statistics, the
 * arithmetic and the parameter gradients in fp32): each output row computed
 * in fp32 and rounded once; each dy row widened before the fp32 backward.
 * `rowbuf` holds omp_get_max_threads() x c floats. */
void seq_ln_fwd_bf16(st_bf16 *y, float *stats, const float *x, const float *g, const float *b, long rows, long c,
                     float *rowbuf);
void seq_ln_bwd_bf16(float *dx, float *dg, float *db, float *partial, const float *x, const st_bf16 *dy,
                     const float *g, const float *stats, long rows, long c, float *rowbuf);

/* GELU, tanh form: y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); tanh
 * is kept (count floats) for the backward, which reads it instead of
 * computing it again. */
void seq_gelu_fwd(float *y, float *tanh_u, const float *x, long count);
void seq_gelu_bwd(float *dx, const float *dy, const float *x, const float *tanh_u, long count);
/* The same on bf16 activations and gradients (tanh_u stays fp32). */
void seq_gelu_fwd_bf16(st_bf16 *y, float *tanh_u, const st_bf16 *x, long count);
void seq_gelu_bwd_bf16(st_bf16 *dx, const st_bf16 *dy, const st_bf16 *x, const float *tanh_u, long count);

/* Each row i of a t x t matrix replaced by the softmax of its columns
 * 0..i, zeros right of the diagonal (one sample's one head). */
void seq_causal_softmax(float *p, long t);
/* dS = P (dP - rowsum(P dP)) scale, in place of dP, zeros right of the diagonal. */
void seq_causal_softmax_bwd(float *ds, const float *p, long t, float scale);
/* The same on a stripe of rows (causal attention in stripes, causal_bf16.c):
 * row r of p (ld floats apart) is the matrix's row first + r; zeros as far
 * as column width. */
void seq_causal_softmax_rows(float *p, long ld, long first, long rows, long width);
void seq_causal_softmax_bwd_rows(float *ds, const float *p, long ld, long first, long rows, long width,
                                 float scale);
/* The same on a stripe of n queries (the matrix's rows first..) held
 * transposed for the products of onednn_causal.c: s is w = first + n keys
 * by n queries, key k's row n floats, and key k counts for query j where
 * k <= first + j.  P is rounded to bf16 into p16 (the same shape) and left
 * in fp32 in s only where keep_fp32 asks; p16 NULL: P in fp32 in s alone
 * (fp32 products).  Each query scaled by its sum's reciprocal (within an
 * fp32 ulp of the quotient).  Each query's max and reciprocal go to max[j],
 * inv[j] (n each), kept by the caller for the backward pass. */
void seq_causal_softmax_cols(float *s, st_bf16 *p16, long first, long n, bool keep_fp32, float *max, float *inv);
/* The backward pass on the same stripe: P again from the scores s and the
 * forward's max and inv (the forward's bits), left in s in fp32 and rounded
 * into p16 where not NULL, and dS = P (dP - rowsum(P dP)) scale from dP
 * (dp, w x n), rounded into ds16, or in place of dP where ds16 is NULL. */
void seq_causal_softmax_again_bwd_cols(float *s, st_bf16 *p16, st_bf16 *ds16, float *dp, const float *max,
                                       const float *inv, long first, long n, float scale);

#endif
