/* Internal: plain-C reference kernels on NCHW / (N, features) float arrays.
 * They define what each layer computes (PyTorch's semantics); the oneDNN
 * path is tested against them.  Backward kernels overwrite their outputs;
 * a NULL output is skipped. */
#ifndef SHMTRAIN_NN_REF_H
#define SHMTRAIN_NN_REF_H

#include <stddef.h>

#include "shmtrain/dtype.h"

struct conv_shape {
    int n, c, h, w;      /* input */
    int o, oh, ow;       /* output channels and size */
    int kh, kw, s, p;    /* kernel, stride, symmetric padding */
};

void ref_conv_fwd(float *y, const float *x, const float *w, const float *b, const struct conv_shape *cs);
void ref_conv_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                  const struct conv_shape *cs);

void ref_linear_fwd(float *y, const float *x, const float *w, const float *b, int n, int in, int out);
void ref_linear_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                    int n, int in, int out);

void ref_relu_fwd(float *y, const float *x, size_t count);
void ref_relu_bwd(float *dx, const float *dy, const float *x, size_t count);

/* Pools use conv_shape with o == c.  Max pooling records the winner's input
 * index per output; average pooling divides by the full window (padding
 * included, PyTorch's count_include_pad=True). */
void ref_maxpool_fwd(float *y, int *argmax, const float *x, const struct conv_shape *ps);
void ref_maxpool_bwd(float *dx, const float *dy, const int *argmax, const struct conv_shape *ps);
void ref_avgpool_fwd(float *y, const float *x, const struct conv_shape *ps);
void ref_avgpool_bwd(float *dx, const float *dy, const struct conv_shape *ps);

/* Batch normalisation over (N, H, W) per channel; `var` is the biased
 * batch variance (what normalises), as oneDNN reports it. */
void ref_bn_fwd_train(float *y, float *mean, float *var, const float *x, const float *gamma,
                      const float *beta, int n, int c, int hw, float eps);
void ref_bn_fwd_infer(float *y, const float *x, const float *gamma, const float *beta,
                      const float *mean, const float *var, int n, int c, int hw, float eps);
void ref_bn_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                const float *mean, const float *var, const float *gamma, int n, int c, int hw, float eps);

/* Sequences: rows of plain [rows, C] activations, rows = samples x T.
 * Layer norm over each row's C features (biased variance, as PyTorch). */
void ref_ln_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma, const float *beta,
                int rows, int c, float eps);
void ref_ln_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x, const float *mean,
                const float *rstd, const float *gamma, int rows, int c);

/* GELU, tanh form (PyTorch's approximate='tanh', GPT-2's). */
void ref_gelu_fwd(float *y, const float *x, size_t count);
void ref_gelu_bwd(float *dx, const float *dy, const float *x, size_t count);

/* Token + position embedding: y[b, t] = wte[ids[b, t]] + wpe[t].  The
 * backward adds into dwte (a tied head may have written it) and writes dwpe. */
void ref_embed_fwd(float *y, const int *ids, const float *wte, const float *wpe, int n, int t, int c);
void ref_embed_bwd(float *dwte, float *dwpe, const float *dy, const int *ids, int n, int t, int c);

/* Causal multi-head self-attention.  qkv: [n, t, 3c] (q, k, v; head h is
 * columns h*c/heads .. of each), y: [n, t, c], att: [n, heads, t, t] the
 * softmax weights (zero above the diagonal), kept for the backward.  With
 * `low` a rounding type, every product's operands are taken as that type
 * carries them (Q, K, V, dY, the weights P and the scaled scores'
 * gradient dS), the softmax and every sum as in fp32: what
 * a fast kernel computing in bf16 between fp32 edges computes. */
void ref_attention_fwd(float *y, float *att, const float *qkv, int n, int t, int c, int heads, st_dtype low);
void ref_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, int n, int t, int c,
                       int heads, st_dtype low);

#endif
