/* 2x2, stride 2 max-pooling without padding, forward and backward, on a
 * layout with the channels innermost: in blocks of 16 or 8 (oneDNN's
 * aBcd16b/aBcd8b) or all together (nhwc).  The oneDNN backend runs it in
 * place of oneDNN 2.6's pooling, which reaches only 2.5-3 GB/s here.
 *
 * The forward pass records, per output element, which window element won
 * (0-3, first maximum in window order on ties, as the reference) or 4 when
 * a fused ReLU clipped the window to 0; the backward pass routes the
 * gradient by it.  The caller owns every buffer. */
#ifndef SHMTRAIN_NN_MAXPOOL2_H
#define SHMTRAIN_NN_MAXPOOL2_H

#include <stdbool.h>
#include <stdint.h>

/* Strides in floats of a channels-innermost layout; `block` lanes are
 * contiguous, `nblocks` blocks of them per pixel group. */
struct pool_layout { long sn, sc, sh, sw; int block, nblocks; };

struct maxpool2_shape {
    struct pool_layout src, dst;   /* same block width */
    int batch, out_h, out_w;       /* the input is at least 2*out_h x 2*out_w */
};

/* dst = max over each window (then max(., 0) with relu); arg = winner. */
void maxpool2_forward(const struct maxpool2_shape *s, const float *src, float *dst, uint8_t *arg, bool relu);

/* diff_src = diff_dst at each window's winner, 0 elsewhere.  Rows and
 * columns beyond 2*out_h x 2*out_w are not written (the caller zeroes). */
void maxpool2_backward(const struct maxpool2_shape *s, const float *diff_dst, const uint8_t *arg, float *diff_src);

#endif
