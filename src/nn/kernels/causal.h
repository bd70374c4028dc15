/* Internal: causal attention's matrix products for one sample and one head.
 *
 * With a causal mask, position i attends to positions j <= i only, so the
 * scores and every product over them need only the lower triangle of the
 * t x t matrix: about half the multiply-adds dnnl_sgemm does on the whole
 * square.  These compute just that, in 6 x 16 register tiles (tiles the
 * diagonal cuts are computed whole; what lies above the diagonal there is
 * left for the caller's softmax to overwrite), and leave the rest alone.
 * On gpt-mini's heads (t 64, 32 dimensions) one sgemm call cost 4.7 us,
 * 0.6 us of it fixed; the six of a head's forward and backward are all
 * small.
 *
 * Matrices are row-major with a leading dimension (floats between rows);
 * Q, K and V are the head's columns of the [t, 3C] qkv rows.  Every sum
 * runs in a fixed order, so a result is the same at any thread count.
 * Tested against ref_seq.c through the attention layer (tests/test_gpt.c).
 */
#ifndef SHMTRAIN_NN_CAUSAL_H
#define SHMTRAIN_NN_CAUSAL_H

/* s[i][j] = alpha * (a_i . b_j) for j <= i, over d dimensions; entries above
 * the diagonal are unspecified.  bt: t x d floats of scratch. */
void causal_scores(float *s, long t, long d, float alpha, const float *a, long lda, const float *b, long ldb,
                   float *bt);

/* y = p v for lower-triangular p (t x t; zero above the diagonal): y_i =
 * sum over k <= i of p[i][k] v_k, rows of d. */
void causal_mix(float *y, long ldy, const float *p, long t, long d, const float *v, long ldv);

/* y = p^T v for lower-triangular p: y_j = sum over i >= j of p[i][j] v_i. */
void causal_mix_t(float *y, long ldy, const float *p, long t, long d, const float *v, long ldv);

#endif
