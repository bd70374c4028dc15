/* Internal: a float matrix transposed, for kernels that want a product's
 * operand the other way round (causal.c's scores, the sequence linear
 * layers' weight gradients). */
#ifndef SHMTRAIN_NN_TRANSPOSE_H
#define SHMTRAIN_NN_TRANSPOSE_H

/* dst[c][r] = src[r][c] for rows x cols of src; lds, ldd: floats between
 * rows of each.  sums (NULL: none): sums[c] = src's column c summed down
 * the rows in order, the same bits as a plain loop (the linear layers' bias
 * gradient, taken while the rows pass by).  Serial: callers split big
 * matrices over threads by columns. */
void nn_transpose(float *dst, long ldd, const float *src, long lds, long rows, long cols, float *sums);

#endif
