/* Internal: an executable network.
 *
 * Exec nodes are the model's nodes after two rewrites that do not change the
 * math: a ReLU that is the only consumer of a conv/linear is fused into it
 * (unless a max-pool follows, see below), and "conv, relu, maxpool" runs as
 * "conv, maxpool, relu" (max and ReLU commute; the ReLU then touches a
 * tensor four times smaller).
 *
 * Gradient flow: a node's backward computes the gradient w.r.t. its input and
 * delivers it to the producer.  The producer's consumer with the highest exec
 * index runs first in backward and writes the producer's `diff`; any other
 * consumer (residual connections) adds into it through `diff_tmp`.
 */
#ifndef SHMTRAIN_NN_NET_H
#define SHMTRAIN_NN_NET_H

#include <dnnl.h>
#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "ref.h"

struct tensor {
    dnnl_memory_desc_t md;   /* oneDNN backend: its layout */
    dnnl_memory_t mem;       /* oneDNN backend */
    float *plain;            /* reference backend: NCHW or (N, C) */
};

struct xnode {
    const struct node *nd;   /* the model node (shapes, parameter offsets) */
    node_kind kind;
    int in, in2;             /* producer exec nodes, -1 if none */
    bool fuse_relu;
    int first_writer;        /* the consumer that writes `diff` first, -1 if none */
    int consumers;
    bool wants_diff;         /* some consumer delivers a gradient here */
    struct tensor dst, diff, diff_tmp;
    char impl[96];           /* what runs it, for st_net_describe */

    /* reference backend scratch */
    int *argmax;
    float *mean, *var;
    uint8_t *mask;
    size_t mask_len;
    float *ref_diff_src;     /* reference: gradient w.r.t. the input before delivery */

    struct onednn_node *dn;  /* oneDNN backend state, NULL for the reference */
};

struct st_net {
    const st_model *model;
    st_net_config cfg;
    int batch;
    struct xnode *x;
    int nx;
    float *params, *grads, *buffers;
    bool own_grads;
    bool training;
    uint64_t dropout_seed;
    float *logits;           /* plain (batch, classes) of the last forward */
    float *dlogits;          /* gradient of the loss w.r.t. the logits */
    float *input_grad;       /* plain, when cfg.input_grad */
    const float *input;      /* the last forward's input (reference backend) */
    bool profiling;
    double prof[NODE_KINDS + 2];
    struct onednn_net *dnet; /* engine, stream, loss reorders; NULL for the reference */
};

/* Dropout mask bit for element i of node k under seed: deterministic. */
bool dropout_keep(uint64_t seed, int node, size_t i, float p);

/* oneDNN backend (onednn.c). */
st_status onednn_build(st_net *n);
st_status onednn_forward(st_net *n, const float *input);
st_status onednn_backward(st_net *n);      /* from the last node's diff */
st_status onednn_set_last_diff(st_net *n, const float *plain); /* plain -> last diff */
st_status onednn_input_grad(st_net *n, float *out);
void onednn_destroy(st_net *n);

/* Reference backend (net.c). */
st_status ref_build(st_net *n);
st_status ref_forward(st_net *n, const float *input);
st_status ref_backward(st_net *n);
void ref_destroy(st_net *n);

double nn_now(void);

#endif
