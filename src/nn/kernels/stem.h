/* Internal: a model's stem, the convolution of a one-channel image into a
 * few channels (at most 8), stride 1: lenet's 1 -> 6 at 5x5.
 *
 * oneDNN's AVX-512 kernels block output channels by 16, so for 6 channels
 * they compute 16: 2.7x the work (docs/benchmarks.md, section 0c).  These
 * keep the 8 channels of two neighbouring pixels in one 16-float vector
 * (channels past c zero) and move it to and from nhwc, c floats a pixel,
 * with one lane shuffle: the layout oneDNN's kernels give a few-channel
 * activation here, which the C max-pool and the next convolution read.
 *
 * Each image is first spread: for every column c of the zero-padded image,
 * pixel c 8 times and pixel c + 1 8 times, one aligned 16-float vector, the
 * one that multiplies a tap's 8 weights (twice) for the output pair whose
 * tap reads column c.  The forward holds a row's 14 pairs (28 pixels, a
 * lenet row) in registers and, for 5x5 and 3x3 kernels, loads each column
 * once per kernel row for every tap that reads it; the weight gradient
 * holds one register per tap of a kernel row, twice (even and odd pairs),
 * over the image's output gradients turned into pairs once.
 *
 * Every sum runs in a fixed order: an output's over the taps (kh, then kw)
 * after the bias; a weight gradient's over a thread's images, then the
 * threads in order (stem_reduce), so a result is the same run to run at a
 * given thread count, as oneDNN's are.  Tested against the reference
 * backend through the layer (tests/test_nn.c). */
#ifndef SHMTRAIN_NN_STEM_H
#define SHMTRAIN_NN_STEM_H

#include <stdbool.h>
#include <stddef.h>

#define STEM_MAX_CHANNELS 8
#define STEM_MAX_KERNEL 7
#define STEM_LANES 16  /* two pixels' 8 channels */

struct stem_shape {
    long h, w;      /* input: 1 x h x w per image, plain */
    int c, k, pad;  /* output channels (at most 8), a k x k kernel, zero padding on every side */
    long oh, ow;    /* output: oh x ow x c per image (nhwc) */
};

/* Floats of scratch one thread needs (the spread image), zero before its
 * first use: the kernels write only the image's interior, so its padding
 * stays zero from then on. */
size_t stem_scratch_floats(const struct stem_shape *s);
/* Floats of one thread's weight-gradient partial sums. */
size_t stem_partial_floats(const struct stem_shape *s);

/* y = conv(x, w) + bias (bias NULL: none), ReLU'd where relu, for `images`
 * images; w: c x k x k (the parameter buffer's layout). */
void stem_forward(const struct stem_shape *s, const float *x, const float *w, const float *bias, bool relu, float *y,
                  long images, float *scratch);

/* One thread's partial sums of the weight gradient over `images` images
 * (x and dy from their first), overwriting `partial`: dy nhwc, masked by
 * y > 0 where relu (y NULL otherwise). */
void stem_backward_weights(const struct stem_shape *s, const float *x, const float *dy, const float *y, long images,
                           float *partial, float *scratch);

/* dw (c x k x k) and db (c; NULL: no bias) from `threads` partials in order. */
void stem_reduce(const struct stem_shape *s, const float *partials, int threads, float *dw, float *db);

#endif
