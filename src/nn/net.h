/* Internal: an executable network.
 *
 * Exec nodes are the model's nodes after two rewrites that do not change the
 * math: a ReLU that is the only consumer of a conv/linear/batch norm/add is fused into it
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

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "shmtrain/clock.h"
#include "model/model.h"
#include "shmtrain/bf16.h"
#include "shmtrain/optim.h"

/* One exec node: graph facts every backend shares, and the backend's own
 * state for it behind one pointer of the backend's type (`be`). */

/* What a layer does in a net of a low precision (bf16, fp16): the layer
 * table's lowp column answers per layer (precision.c). */
enum lowp_role {
    LOWP_NO = 0,      /* fp32 only: a low-precision input is converted on the way in */
    LOWP_COMPUTES,    /* its kernels compute in the low precision (convolution, linear, attention) */
    LOWP_CARRIES,     /* runs in whatever type its input has (ReLU, pooling, batch norm, ...) */
    LOWP_WRITES       /* computes in fp32, writes its output in it where every consumer takes it (layer norm) */
};

struct xnode {
    const struct node *nd;   /* the model node (shapes, parameter offsets) */
    node_kind kind;
    int in, in2;             /* producer exec nodes, -1 if none */
    bool fuse_relu;
    int first_writer;        /* the consumer that writes `diff` first, -1 if none */
    int consumers;
    bool wants_diff;         /* some consumer delivers a gradient here */
    char impl[160];          /* what runs it, for st_net_describe */
    enum lowp_role lowp_role;  /* the rule's verdict in a low-precision net (LOWP_NO in fp32) */
    bool lowp;               /* computes in the net's low precision (COMPUTES or INSIDE) */
    st_dtype compute;        /* what it computes in, as built */
    st_dtype stored;         /* the type its output is kept in */
    void *be;                /* the backend's state for this node (its type: ref_state, dn_state) */
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
    float *logits;           /* plain (batch, classes) of the last forward; NULL when fused_loss */
    float *dlogits;          /* gradient of the loss w.r.t. the logits; NULL when fused_loss */
    bool fused_loss;         /* the backend computes the loss from the tied head's input, in
                                chunks of rows (struct nn_backend's loss), never holding the
                                whole logits: chosen in st_net_create */
    double *loss_rows;       /* st_net_loss: each row's loss, summed in order */
    float *input_grad;       /* plain, when cfg.input_grad */
    const void *input;       /* the last forward's input (reference backend) */
    bool profiling;
    double prof[NODE_KINDS + 2];
    st_net_counters counters;          /* conversions and weight reorders run (st_net_counters_get) */
    st_weight_copy *copies;            /* the low-precision weights the kernels read (weight_copies.c) */
    int ncopies, cap_copies;
    bool copies_stale;                 /* the parameters may have changed since the copies were written */
    void *be_net;            /* the backend's state for the net, if it keeps one (oneDNN: dn_net) */
    const struct nn_backend *backend;  /* what runs the graph (struct nn_backend, below) */
    st_grads_ready_fn grads_ready;     /* st_net_on_grads_ready, or NULL */
    void *grads_ready_ctx;
};

/* Rows of node nd's plain activation at this batch: samples x positions. */
static inline size_t nn_rows(const st_net *n, const struct node *nd)
{
    return (size_t)n->batch * (size_t)node_positions(nd);
}

/* Floats in node nd's activation at this batch (plain layout). */
static inline size_t nn_node_size(const st_net *n, const struct node *nd)
{
    return (size_t)n->batch * st_shape_elems(&nd->shape);
}

static inline uint64_t nn_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Dropout mask bit for element i of node k under seed: deterministic, and
 * the same for both backends. */
static inline bool dropout_keep(uint64_t seed, int node, size_t i, float p)
{
    uint64_t s = seed ^ ((uint64_t)node << 48) ^ (i * 0x9e3779b97f4a7c15ull);
    double u = (double)(nn_splitmix64(&s) >> 40) / (double)(1ull << 24);
    return u >= p;
}

/* Exec node j's backward is done: its parameters' gradients are final. */
static inline void nn_grads_ready(st_net *n, int j)
{
    const struct node *nd = n->x[j].nd;
    if (!n->grads_ready || !nd->w_count)
        return;
    const size_t end = nd->b_count ? nd->b_off + nd->b_count : nd->w_off + nd->w_count;
    n->grads_ready(n->grads_ready_ctx, nd->w_off, end - nd->w_off);
}

/* -------------------------------------------------------- precision.c -- */

/* The layer table's lowp column, asked with the net's low precision.
 * lowp_computes: convolutions and inner products compute in it, but not a
 * convolution of a few input channels (it loses, measured); lowp_attention:
 * attention does where its kernels have the instruction. */
enum lowp_role lowp_never(const st_net *n, const struct xnode *x, st_dtype low);
enum lowp_role lowp_computes(const st_net *n, const struct xnode *x, st_dtype low);
enum lowp_role lowp_carries(const st_net *n, const struct xnode *x, st_dtype low);
enum lowp_role lowp_attention(const st_net *n, const struct xnode *x, st_dtype low);
enum lowp_role lowp_writes(const st_net *n, const struct xnode *x, st_dtype low);
/* Every node's lowp_role and lowp, before anything is built: a layer's
 * output type depends on its consumers' roles. */
void nn_assign_roles(st_net *n);
/* Does node j, a layer computing in the low precision or writing it, keep
 * its output (and the output's gradient) low?  When every consumer takes
 * it: computes in it, or carries it on (an add only when its other input
 * can be low too: a residual stream in fp32 stays fp32); the last layer
 * never (the loss reads fp32). */
bool nn_consumers_take_lowp(const st_net *n, int j);
/* Every node's compute and stored type from the roles alone, in order (a
 * carrier's input is planned before it): st_net_create plans before any
 * backend builds. */
void nn_plan_precision(st_net *n);
/* A builder that found no kernel for node j in the plan's low type says
 * so here: j computes in fp32, and the edges from j on are planned again
 * (the nodes before j are built: j reads what they keep). */
void nn_plan_fallback(st_net *n, int j);

/* ---------------------------------------------------- weight_copies.c -- */

/* Adds a copy in `type` (bf16, fp16) of `count` parameters from `offset`
 * at dst (owned by the backend), element i at dst[index[i]]; the net takes
 * `index` (malloc'd; NULL: in order).  The copy is written before the next
 * forward pass. */
st_status nn_copy_add(st_net *n, size_t offset, size_t count, uint16_t *dst, st_dtype type, uint32_t *index);
/* The same for a [rows, cols] weight's bf16 copy in one of AMX's pair
 * layouts (st_copy_layout), its padding zeroed by the caller. */
st_status nn_copy_add_pairs(st_net *n, size_t offset, long rows, long cols, uint16_t *dst, st_copy_layout layout);
/* Writes every copy from the parameters if they may have changed (each
 * counted as a weight reorder). */
void nn_copies_refresh(st_net *n);
void nn_copies_free(st_net *n);


/* A backend runs a built exec graph.  Two implement it: the reference
 * (ref_backend.c, plain C, the definition of every op) and oneDNN
 * (onednn_*.c).  st_net_create (backends.c) picks one from its table by
 * st_net_config.backend; nothing in the net knows which it is. */
struct nn_backend {
    const char *name;
    /* Has it kernels that compute layer x in `type` (bf16, fp16), or, for
     * a layer that computes in fp32 and writes the low type (lowp_writes),
     * that write it?  The precision rules ask this and nothing else of a
     * backend; the plan they make (x[].compute, x[].stored, before build)
     * is what the backend builds. */
    bool (*computes)(const st_net *n, const struct xnode *x, st_dtype type);
    /* ST_OK, or why it builds no net of this precision (bf16, fp16) here:
     * the one answer st_nn_precision_check gives for it. */
    st_status (*takes)(st_dtype precision, const st_nn_tuning *t);
    st_status (*build)(st_net *n);                     /* after the graph and its plan; fills x[].impl */
    st_status (*forward)(st_net *n, const void *input);
    st_status (*backward_from)(st_net *n, const float *d_output);  /* plain gradient of the output */
    st_status (*input_grad)(st_net *n, float *out);    /* plain, when cfg.input_grad */
    void (*destroy)(st_net *n);                        /* safe after a failed build */
    /* Optional, for a net ending in a tied head (n->fused_loss): the
     * softmax cross-entropy of the first `rows` rows, each row's loss into
     * row_loss and the count whose top logit is the label into *correct,
     * and with `gradient` the head's parameter and input gradients as
     * well, for d(mean over rows)/d(logits); and the logits themselves, in
     * full, for those who ask (sampling, tests). */
    st_status (*loss)(st_net *n, const int *labels, int rows, bool gradient, double *row_loss, int *correct);
    st_status (*output)(st_net *n, float *out);
    void (*gradient_memory)(const st_net *n, st_net_gradient_memory *m);  /* optional */
};

/* st_net_create's work once backends.c has picked the backend and
 * checked the request: the graph, its precision plan, and (unless
 * plan_only) the data and the backend's build. */
st_status nn_net_create(st_net **out, const st_model *m, const st_net_config *cfg, const struct nn_backend *backend);

/* ST_OK, or why nothing runs on this net (a plan-only one). */
st_status nn_runnable(const st_net *n);

/* loss.c: one row's softmax cross-entropy: its loss into *row_loss and
 * d(loss)/d(z) / rows into dz (which may be z itself; k floats of scratch
 * where dz16 is given), or rounded to bf16 into dz16; whether the top
 * logit is the label.  The definition both the loss and a fused head use. */
bool nn_loss_row(const float *z, float *dz, st_bf16 *dz16, int k, int label, int rows, double *row_loss);


#endif
