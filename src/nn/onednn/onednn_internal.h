/* Internal: the oneDNN backend's shared state and plumbing.
 *
 * The backend is split by job:
 *   onednn_context.c  the registry (every memory, primitive and descriptor
 *                     the net owns) and the plumbing every layer uses:
 *                     descriptors and their layouts, choosing a kernel,
 *                     delivering gradients, op lists
 *   onednn_reorder.c  reorders, each checked once when it is made
 *   onednn_weights.c  convolution and inner product (forward, backward-data,
 *                     backward-weights; the plain-weights and nhwc choices)
 *   onednn_wgrad.c    a bf16 linear layer's weight gradient as a matmul on
 *                     AMX's tiles (where oneDNN has them)
 *   onednn_pool.c     pooling: the C 2x2 max-pool and oneDNN pooling
 *   onednn_chunk.c    the chunking pass over the finished plan: a
 *                     convolution run in L2-sized chunks inside the C
 *                     max-pool's steps
 *   onednn_layers.c   the small ones: input, ReLU, batch norm, dropout,
 *                     flatten, add
 *   onednn_seq.c      the sequence layers: embeddings, layer norm,
 *                     linear, GELU (C steps over plain [rows, C]
 *                     tensors, matrix products through dnnl_sgemm; the row
 *                     kernels in seq_kernels.c)
 *   onednn_attention.c  causal attention: every head a task over the
 *                     threads, through the kernel it chooses (causal.c's,
 *                     causal_bf16.c's, or onednn_causal.c's matmul
 *                     primitives)
 *   onednn_head.c     the tied head, and the loss fused with it in chunks
 *                     of rows (the backend's loss and output)
 *   onednn_precision.c  each edge's type as built, from precision.c's roles
 *   onednn_plan.c     the build (one builder per layer kind), the executor,
 *                     teardown, and the backend's function table
 *
 * Build time: for every exec node, create its primitives once (forward,
 * backward-data, backward-weights), query the layouts they chose, and record
 * a forward and a backward list of "ops": a primitive with its argument array,
 * a reorder, or a small C step.  Run time: execute the lists.
 *
 * Layout rules (docs/engine.md, verified here): conv and inner-product
 * layouts are `any` and activations stay in whatever layout their producer
 * chose; a reorder is inserted only where dnnl_memory_desc_equal says two
 * layouts differ.  Parameters stay plain in the flat buffer.  Inner
 * products use them as they are (plain_weights); convolution weights are
 * reordered into the forward and the backward-data layouts each step, and
 * their gradients back into the plain flat gradient buffer.  The plain
 * inner products run oneDNN's gemm:jit kernels, which move rsp into the heap
 * while they run: a signal handler must never run on a compute thread
 * (src/shmtrain.c takes signals with sigwait instead).
 *
 * A convolution feeding a C max-pool runs in batch chunks inside the pool's
 * step when its output would not fit L2, and so does its backward-weights
 * pass when it is a first layer: a pass over the built plan (onednn_chunk.c).
 * Nothing learns upstream of a first layer, so it runs no backward-data
 * pass.  The choices a machine may reverse have a switch in
 * st_net_config.tuning (tuning.h) that turns them back, for comparison:
 * no_chunks, brgconv (see dn_conv_avoid), ip_any (see plain_weights),
 * onednn_pool (oneDNN's pooling instead of maxpool2.c), onednn_layernorm
 * (oneDNN's layer norm instead of seq_kernels.c's), seq_tn, onednn_stem
 * (oneDNN's convolution instead of stem.c for a one-channel stem).
 *
 * Precision bf16 (st_net_config.precision): each layer kind's role in the
 * layer table (computes in bf16, carries bf16, or stays fp32) decides every
 * tensor edge's type once, at plan time (precision.c, dn_output_lowp); builders make
 * their outputs in the decided type and read their inputs as their
 * producers left them, a reorder converting only at an edge between an
 * fp32-only layer and a bf16 one.  Weight gradients come out of oneDNN in
 * fp32.
 *
 * tuning.verbose prints every reorder the build inserts (with sizes),
 * every backward pass that had to fall back from the forward's layouts, and
 * the kernel each layer got.
 *
 * Ownership: everything made through dn_mem_new, dn_prim_new, dn_pd_keep
 * and the descriptor helpers (dn_md_tag and the ones built on it,
 * dn_md_like) belongs to the net's registry (struct onednn_net) and goes
 * with it; a descriptor queried from a primitive descriptor or a memory is
 * borrowed from it (oneDNN 3 hands out handles), so struct dn_tensor keeps
 * its memory's own.  An onednn_node owns its op lists and its C buffers.
 */
#ifndef SHMTRAIN_NN_ONEDNN_INTERNAL_H
#define SHMTRAIN_NN_ONEDNN_INTERNAL_H

#include <dnnl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/maxpool2.h"
#include "kernels/simd.h"
#include "onednn_causal.h"
#include "shmtrain/bf16.h"
#include "net.h"
#include "kernels/stem.h"

#if DNNL_VERSION_MAJOR < 3 || (DNNL_VERSION_MAJOR == 3 && DNNL_VERSION_MINOR < 1)
#error "the engine is written against oneDNN 3.1 or newer (scripts/install-deps.sh installs it)"
#endif

/* What a reorder moves, for the net's counters (st_net_counters). */
enum op_counted {
    OP_COUNTS_NOTHING = 0,
    OP_COUNTS_CONVERSION,                /* an activation or gradient between fp32 and bf16 */
    OP_COUNTS_WEIGHT_REORDER,            /* a parameter or its gradient, to or from the flat buffers */
    OP_COUNTS_ACTIVATION_REORDER         /* an activation or gradient copied or relaid in its own type */
};

struct op {
    dnnl_primitive_t prim;
    st_status (*step)(st_net *n, int node);  /* a C step instead of a primitive */
    int node, prof;                       /* prof: node kind, or NODE_KINDS for reorders */
    enum op_counted counted;
    size_t counted_bytes;                 /* a conversion's source bytes */
    int nargs;
    dnnl_exec_arg_t args[10];
};

struct oplist {
    struct op *v;
    int n, cap;
};

/* A node's activation or gradient as oneDNN holds it: its layout, and the
 * memory (owned by the registry). */
struct dn_tensor {
    const_dnnl_memory_desc_t md;         /* mem's own: lives as long as the memory */
    dnnl_memory_t mem;
};

/* Batch norm's statistics in training. */
struct dn_bn_state {
    dnnl_memory_t mean, var;
};

/* Dropout's scaled mask, and where its backward writes. */
struct dn_dropout_state {
    float *mask_scale;                   /* 0 or 1/(1-p) per element */
    dnnl_memory_t diff_src;
};

/* The C 2x2/2 max-pool (see build_maxpool2 in onednn_pool.c). */
struct dn_pool_state {
    struct pool_layout src, dst;
    uint8_t *arg;                        /* the winner of each output */
    dnnl_memory_t target;                /* where its backward writes */
    bool relu;                           /* the ReLU after it runs inside it (dn_build_relu) */
    dnnl_memory_t diff;                  /* then the gradient comes from the ReLU's diff */
    bool edges_zeroed;                   /* the target keeps its zero edges (sole writer) */
};

/* The convolution feeding a C max-pool, run in batch chunks inside the
 * pool's forward step, and its backward-weights pass in the same chunks
 * inside the pool's backward step when that is the convolution's only
 * backward pass (onednn_chunk.c).  Held by the pool. */
struct dn_chunk_state {
    int images;                          /* per chunk; 0: not chunked */
    dnnl_primitive_t conv;
    dnnl_exec_arg_t args[4];
    int nargs;
    dnnl_memory_t src, full_src;
    long src_image;                      /* floats per image in the convolution's source */
    dnnl_primitive_t bwd_w;
    dnnl_memory_t diff;                  /* a chunk of the convolution's output gradient */
    dnnl_memory_t dw, db;                /* one chunk's weight gradients */
    dnnl_memory_t total_dw, total_db;    /* what the whole-batch pass wrote */
    bool bwd_moved;
};

/* The sequence layers' C steps (onednn_seq.c): where the gradient for the
 * input goes, and the statistics and weights the backward reads. */
struct dn_seq_state {
    dnnl_memory_t src;                   /* the input, plain [rows, c] */
    dnnl_memory_t target;                /* where the input's gradient goes; NULL if unwanted */
    float *stats;                        /* layer norm: each row's mean and 1 / std; attention's
                                            matmul kernel: each query's softmax max and 1 / sum */
    float *partial;                      /* layer norm: per-thread dgamma, dbeta */
    float *scratch;                      /* layer norm writing bf16: a row per thread (attention's
                                            is the net's, head_scratch) */
    float *tanh_u;                       /* GELU: tanh of its argument, kept for the backward */
    int att_kernel;                      /* attention: its kernel (onednn_attention.c's table) */
    dn_causal *causal;                   /* ... the matmul kernel's primitives (the net's, causal) */
};

/* The tied head's bf16 products for chunks of one size (onednn_head.c),
 * and the memories they read and write, their buffers set at each call. */
struct dn_head_matmuls {
    dnnl_primitive_t logits, dx, dtable, dtable_add;  /* dtable_add: the table's gradient added to */
    dnnl_memory_t rows, out, dz, dz_t, dx_out;
    dnnl_memory_t table_logits, table_dx;  /* the table as the first two read it (the head's, or its views) */
    dnnl_primitive_t rows_blocked;       /* AMX: the chunk's rows reordered into rows_dtable; else NULL */
    dnnl_memory_t rows_dtable;           /* the rows as the table's gradient reads them */
};

/* The tied head (onednn_head.c): chunks of rows, the fused loss's state. */
struct dn_head_state {
    long chunk;                          /* rows a chunk */
    float *logits;                       /* fused: a chunk's logits, then in place their gradient */
    const float *dy;                     /* fused: a caller's gradient of the whole logits, for one backward */
    bool grads_done;                     /* fused: the loss has made this step's head gradients */
    dnnl_memory_t table, table_t, dtable; /* bf16: the optimizer's plain copy of the token table (NULL where
                                            it writes both blocked ones), transposed view */
    dnnl_memory_t table_logits, table_dx; /* AMX: the table in the products' blocked layouts (NULL: plain) */
    st_bf16 *rows, *dz;                  /* bf16: a chunk's input rows and its logits' gradient */
    struct dn_head_matmuls full, tail;   /* bf16: for a whole chunk and the last, shorter one */
};

/* How a sequence linear layer's weight gradient dW = dY^T X reaches
 * dnnl_sgemm (onednn_seq.c says why; bench/gemm_bound.c times the product
 * the same way): its operands as they are ("TN"), or, when they hold at
 * most DN_WGRAD_TRANSPOSED_MAX_FLOATS together (4 MB), dY transposed and X
 * as it is ("NN", X no wider than dY) or transposed too ("NT"). */
#define DN_WGRAD_TRANSPOSED_MAX_FLOATS (1L << 20)

enum dn_wgrad_form { DN_WGRAD_TN, DN_WGRAD_NN, DN_WGRAD_NT };

static inline enum dn_wgrad_form dn_wgrad_form(long rows, long in, long out, bool untransposed)
{
    if (untransposed || rows * (in + out) > DN_WGRAD_TRANSPOSED_MAX_FLOATS)
        return DN_WGRAD_TN;
    return in <= out ? DN_WGRAD_NN : DN_WGRAD_NT;
}


/* What a layer's backward converts for its kernels (onednn_diffs.c,
 * dn_bwd_temp): each copy lives only while that layer's backward runs. */
enum dn_temp { DN_TEMP_SRC, DN_TEMP_DIFF_DST, DN_TEMP_DIFF_DST_DATA, DN_TEMP_DIFF_SRC, DN_TEMP_SCRATCHPAD, DN_TEMP_SLOTS };

/* One exec node's oneDNN state: what every node has, then each layer
 * family's own. */
/* A one-channel stem (onednn_stem.c): its shape, and each thread's spread
 * image and weight-gradient partials, in memory the net owns. */
struct dn_stem_state {
    struct stem_shape shape;
    float *scratch, *partials;
    int threads;                         /* how many threads the scratch serves */
};

/* A bf16 linear layer's weight gradient as a matmul on AMX
 * (onednn_wgrad.c); product NULL: the inner product's backward-weights. */
struct dn_wgrad_state {
    dnnl_primitive_t product;
    dnnl_memory_t dy, x;                 /* dY and X in bf16 [rows, c] as the backward holds them */
    dnnl_memory_t dy_t;                  /* dY read transposed; its buffer set at each call */
    dnnl_memory_t dw;                    /* the flat gradient buffer's */
};

struct onednn_node {
    struct dn_tensor dst, diff, diff_tmp;  /* diff_tmp: a second consumer's gradient, added in */
    struct oplist fwd, fwd_infer, bwd;   /* fwd_infer: batch norm in evaluation mode */
    dnnl_memory_t src;                   /* what the forward reads */
    dnnl_primitive_t accum;              /* diff += diff_tmp, when 2+ consumers */
    int diff_home;                       /* >= 0: diff lives in that node's gradient buffer (an add's) */
    bool diff_deferred;                  /* diff (and diff_tmp) get their buffer from dn_share_diffs */
    bool weights_paired;                 /* the optimizer writes its bf16 weights in AMX's layout (dn_add_pair_copy) */
    size_t elems;                        /* floats in dst's buffer (padding included) */
    struct dn_bn_state bn;
    struct dn_dropout_state dropout;
    struct dn_pool_state pool;
    struct dn_chunk_state chunk;
    struct dn_seq_state seq;
    struct dn_stem_state stem;
    struct dn_head_state head;
    struct dn_wgrad_state wgrad;
};

struct onednn_net {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_memory_t *mems;
    dnnl_primitive_t *prims;
    dnnl_primitive_desc_t *pds;
    dnnl_memory_desc_t *mds;
    int nmems, nprims, npds, nmds, cap_mems, cap_prims, cap_pds, cap_mds;
    dnnl_memory_t input_user;            /* plain input; handle set per forward */
    dnnl_memory_t logits_user, dlast_user;
    struct oplist to_logits, from_dlast; /* the last node's output to plain logits, and its gradient back */
    int cur;                             /* node being built, for messages */
    st_nn_tuning opt;                    /* the net config's switches (tuning.h) */
    float *transposed;                   /* the sequence linear layers' operands transposed, one layer at a time */
    bool diffs_shared;                   /* gradient buffers shared by liveness (onednn_diffs.c) */
    void **diff_buffers;                 /* ... those buffers, */
    int ndiff_buffers;                   /* ... how many, */
    size_t diff_bytes;                   /* ... and their bytes together */
    size_t transposed_floats;            /* its size: the largest layer's need */
    float *head_scratch;                 /* attention's per-thread scratch, one for every attention
                                            layer (they run one at a time) */
    size_t head_scratch_floats;          /* its size: the largest layer's need */
    dn_causal **causal;                  /* attention's matmul primitives, one set a head shape */
    int ncausal;
    dnnl_primitive_attr_t user_scratchpad; /* inner products' backward: scratchpads we place (dn_op_scratchpad) */
    struct dn_bwd_temps {                /* backward's converted copies, one buffer per purpose */
        dnnl_memory_t *mems;
        int *slot, n, cap;
        size_t bytes[DN_TEMP_SLOTS];
        void *buffers[DN_TEMP_SLOTS];
    } temps;
};

/* The net's backend pointers, as oneDNN's: the state behind each node's
 * `be` and the net's `be_net` (net.h keeps them opaque). */
static inline struct onednn_node *dn_state(const struct xnode *x) { return x->be; }
static inline struct onednn_net *dn_net(const st_net *n) { return n->be_net; }

#define TRY(call)                                                                        \
    do {                                                                                 \
        dnnl_status_t s_ = (call);                                                       \
        if (s_ != dnnl_success)                                                          \
            return dn_dnnl_error(n, #call, s_);                                          \
    } while (0)

#define OK(expr)                                                                         \
    do {                                                                                 \
        st_status t_ = (expr);                                                           \
        if (t_ != ST_OK)                                                                 \
            return t_;                                                                   \
    } while (0)

/* ------------------------------------------------- onednn_context.c -- */

st_status dn_dnnl_error(const st_net *n, const char *call, dnnl_status_t s);
/* One of the net's scratch buffers shared by layers that run one at a time,
 * grown (zeroed) to the largest layer's need while the net is built. */
st_status dn_reserve_shared(float **buf, size_t *have, size_t floats, const char *purpose);
st_status dn_mem_new(st_net *n, dnnl_memory_t *out, const_dnnl_memory_desc_t md, void *handle);
/* A memory with no buffer yet (its handle set before each use), or only a
 * descriptor's carrier (a fused head's logits). */
st_status dn_mem_unbacked(st_net *n, dnnl_memory_t *out, const_dnnl_memory_desc_t md);
void *dn_mem_ptr(dnnl_memory_t m);
const_dnnl_memory_desc_t dn_mem_md(dnnl_memory_t m);
/* A descriptor's element type (fp32 for NULL: no memory yet). */
dnnl_data_type_t dn_md_type(const_dnnl_memory_desc_t md);

/* Keeps a primitive descriptor a builder has just created with oneDNN's
 * creator for its kind (`created` is that call's status, `call` its text for
 * messages), after moving it to the implementation the engine wants: with
 * `avoid` set, the first candidate whose kernel name does not start with it
 * (and is not the reference); for a bf16 pd under SHMTRAIN_BF16_ANY_ISA, the
 * reference; else oneDNN's first.  The net owns it from here. */
st_status dn_pd_keep(st_net *n, const char *call, dnnl_status_t created, dnnl_primitive_desc_t *pd, const char *avoid);
#define DN_PD(n, pd, avoid, create_call) dn_pd_keep((n), #create_call, (create_call), &(pd), (avoid))

const char *dn_conv_avoid(const st_net *n, const_dnnl_memory_desc_t src);
st_status dn_prim_new(st_net *n, dnnl_primitive_t *out, const_dnnl_primitive_desc_t pd);
const_dnnl_memory_desc_t dn_query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index);
const_dnnl_memory_desc_t dn_arg_md(const_dnnl_primitive_desc_t pd, int arg);
bool dn_same(const_dnnl_memory_desc_t a, const_dnnl_memory_desc_t b);

/* Memory descriptors the engine creates belong to the net (freed with it). */
st_status dn_md_tag(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt,
                    dnnl_format_tag_t tag);
/* A matrix's descriptor, a x b: the head's and the weight gradient's products. */
st_status dn_md2(st_net *n, const_dnnl_memory_desc_t *md, long a, long b, dnnl_data_type_t dt,
                 dnnl_format_tag_t tag);
st_status dn_plain_md(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims);
st_status dn_any_md(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims);
st_status dn_any_md_of(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt);
/* `md`'s layout with another data type and, where batch > 0, another size
 * of its outermost dimension (the batch): oneDNN 3 has no setters. */
st_status dn_md_like(st_net *n, const_dnnl_memory_desc_t *out, const_dnnl_memory_desc_t md, dnnl_dim_t batch,
                     dnnl_data_type_t dt);

/* A memory descriptor's fields, read once through dnnl_memory_desc_query
 * (3.x keeps them behind a handle); a blocked layout only. */
struct dn_layout {
    int ndims, nblks;                    /* nblks: inner blocks (0: a plain permutation) */
    dnnl_data_type_t dt;
    dnnl_format_kind_t kind;
    dnnl_dim_t offset0;
    dnnl_dims_t dims, padded, strides, blks, idxs;
};
bool dn_layout_of(const_dnnl_memory_desc_t md, struct dn_layout *l);
/* Where element `idx` (logical indices, one per dimension) lies, in elements. */
dnnl_dim_t dn_layout_offset(const struct dn_layout *l, const dnnl_dim_t *idx);

st_status dn_add_op(st_net *n, struct oplist *l, dnnl_primitive_t prim, int prof, ...);
st_status dn_add_step(st_net *n, struct oplist *l, st_status (*step)(st_net *, int), int prof);
void dn_md_str(char *buf, size_t len, const_dnnl_memory_desc_t md);
void dn_impl_name(struct xnode *x, const_dnnl_primitive_desc_t pd);
st_status dn_set_dst(st_net *n, struct xnode *x, const_dnnl_memory_desc_t md);
st_status dn_set_dst_diff_in(st_net *n, struct xnode *x, const_dnnl_memory_desc_t md, int home);
st_status dn_deliver(st_net *n, int j, int p, const_dnnl_memory_desc_t md, dnnl_memory_t computed, dnnl_memory_t *target);
st_status dn_input_as(st_net *n, struct xnode *x, const_dnnl_memory_desc_t want, dnnl_memory_t *out);
/* Node j's backward primitive `prim`: its arguments (key, memory pairs
 * ending in -1) and DNNL_ARG_DIFF_SRC of layout md, which goes where
 * dn_deliver says or, where the input wants no gradient, to a memory of its
 * own (oneDNN computes it anyway).  The op goes in before what the delivery
 * adds (a reorder, a sum), which read what it writes.  *op (if op): the
 * op, valid until the list grows. */
st_status dn_add_bwd_op(st_net *n, int j, dnnl_primitive_t prim, const_dnnl_memory_desc_t md, struct op **op, ...);
st_status dn_accum_new(st_net *n, struct xnode *x);
bool dn_is_reference_impl(const_dnnl_primitive_desc_t pd);
dnnl_memory_t dn_arg_of(const struct op *o, int key);

/* ------------------------------------------------- onednn_reorder.c -- */

/* Appends to `l` the reorder of `from`'s contents into `to`, checked once
 * when it is made: an index pattern goes through it and every element must
 * land where `to`'s layout says (Debian 13's oneDNN 3.7.2 misplaces a third
 * of a weight reorder to ABcd16a16b when the outputs are not a multiple of
 * 16; 3.6.2 did not).  A wrong direct reorder gives way to two right ones
 * through an intermediate layout; none right is an error naming both. */
st_status dn_add_reorder(st_net *n, struct oplist *l, dnnl_memory_t from, dnnl_memory_t to);
/* The replacement: two reorders through the first intermediate layout for
 * which both are right (*done false: none found). */
st_status dn_add_reorder_two_step(st_net *n, struct oplist *l, dnnl_memory_t from, dnnl_memory_t to, bool *done);
/* Does `r`, a reorder, move every element from layout `from` to where
 * layout `to` puts it?  f32, bf16 and s32 are checked; tests hand it
 * mismatched layouts to see it say no. */
st_status dn_reorder_verify(st_net *n, dnnl_primitive_t r, const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to,
                            bool *right);

/* ------------------------------------------------- onednn_weights.c -- */

/* The pair layout (st_copy_layout) md has for a [rows, cols] weight, or
 * ST_COPY_LISTED where it has none of them. */
st_status dn_pair_layout(st_net *n, const_dnnl_memory_desc_t md, long rows, long cols, st_copy_layout *layout);
/* Where mem's layout is a pair layout of the [rows, cols] weight at
 * offset (and SHMTRAIN_ONEDNN_REORDERED_COPIES is not set), a copy the
 * optimizer writes straight into mem (*added true; mem made by dn_mem_new,
 * so its padding is zero); else nothing. */
st_status dn_add_pair_copy(st_net *n, struct xnode *x, size_t offset, long rows, long cols, dnnl_memory_t mem,
                           bool *added);

/* A convolution's or inner product's dimensions, as oneDNN takes them. */
struct weights_layer {
    int ndims;
    dnnl_dims_t src, wei, bias, dst, strides, pad;
};

void dn_weights_dims(const st_net *n, const struct xnode *x, struct weights_layer *w);
/* A fused ReLU (x->fuse_relu): the forward's post-op (*attr NULL where
 * none is fused; the caller destroys it), and the backward's first op, the
 * gradient made the pre-activation's in place from the forward output. */
st_status dn_relu_attr(st_net *n, const struct xnode *x, dnnl_primitive_attr_t *attr);
st_status dn_build_fused_relu_bwd(st_net *n, struct xnode *x);
st_status dn_weights_fwd_pd(st_net *n, const struct xnode *x, const struct weights_layer *w, const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t wei, const_dnnl_memory_desc_t bias, const_dnnl_memory_desc_t dst, dnnl_primitive_desc_t *pd);
st_status dn_conv_or_ip_bwd_pd(st_net *n, const struct xnode *x, const struct weights_layer *w, bool weights_pass, const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t wei, const_dnnl_memory_desc_t bias, const_dnnl_memory_desc_t dst, const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd);
st_status dn_build_weights(st_net *n, int j);
/* Where oneDNN has AMX, does a bf16 inner product have rows enough a step
 * for the tiles' kernels to pay (see AMX_ROWS in onednn_cpu.c)? */
bool dn_amx_rows(const st_net *n, const struct xnode *x);
/* The backward pass's own view of a tensor: `have` if its layout is `want`,
 * else a scratch memory refreshed by a reorder (appended to `bwd`). */
st_status dn_bwd_input(st_net *n, struct oplist *bwd, dnnl_memory_t have, const_dnnl_memory_desc_t want,
                       enum dn_temp purpose, dnnl_memory_t *out);

/* --------------------------------------------------- onednn_wgrad.c -- */

/* Should node x's weight gradient be onednn_wgrad.c's matmul? */
bool dn_wgrad_matmul_wanted(const st_net *n, const struct xnode *x);
/* Builds it into x's backward list, reading dY as *ddst (for the
 * backward-data pass to share); *built false where oneDNN has only its
 * reference kernels for it (nothing added then). */
st_status dn_build_wgrad_matmul(st_net *n, int j, const struct weights_layer *wl, dnnl_memory_t *ddst, bool *built);
st_status dn_build_linear(st_net *n, int j);
st_status dn_build_conv(st_net *n, int j);

/* ---------------------------------------------------- onednn_stem.c -- */

bool dn_stem_fits(const st_net *n, const struct xnode *x);
st_status dn_build_stem(st_net *n, int j);

/* ----------------------------------------------- onednn_precision.c -- */

/* Does node j keep its output (and the output's gradient) in bf16, as
 * built?  A layer computing in bf16 or writing it when every consumer takes
 * it (nn_consumers_take_lowp), a carrying layer when its inputs were built
 * bf16. */
bool dn_output_lowp(const st_net *n, int j);
/* The plan's type (st_dtype) as oneDNN's: the one mapping between them. */
dnnl_data_type_t dn_type_of(st_dtype t);
/* The type node j's output is kept in, once built. */
dnnl_data_type_t dn_dst_type(const st_net *n, int j);

/* ----------------------------------- the other layer families' builders -- */

st_status dn_build_pool(st_net *n, int j);
/* Is node j a C 2x2 max-pool whose forward is its one step (not chunked yet)? */
bool dn_is_c_maxpool(const st_net *n, int j);

/* -------------------------------------------------- onednn_chunk.c -- */

/* The chunking pass over a finished plan (see onednn_chunk.c). */
st_status dn_chunk_pass(st_net *n);
/* onednn_diffs.c: whether this net's gradients share buffers (a model of
 * sequence layers), and the pass over the built plan that gives each
 * deferred gradient its buffer; the buffers' release. */
bool dn_diffs_shared(const st_net *n);
st_status dn_share_diffs(st_net *n);
void dn_diffs_free(struct onednn_net *d);
void dn_gradient_memory(const st_net *n, st_net_gradient_memory *m);
/* A memory for a conversion one layer's backward makes (`purpose`): where
 * gradients are shared (a sequence model), unbacked until dn_share_diffs
 * gives every copy of a purpose one buffer, the largest's size; else a
 * buffer of its own. */
st_status dn_bwd_temp(st_net *n, enum dn_temp purpose, const_dnnl_memory_desc_t md, dnnl_memory_t *out);
/* The attribute that makes a primitive's scratchpad ours to give (made once
 * per net), and the op's scratchpad argument for a pd made with it: a
 * DN_TEMP_SCRATCHPAD memory, shared by every layer's backward. */
st_status dn_user_scratchpad(st_net *n, const_dnnl_primitive_attr_t *out);
st_status dn_op_scratchpad(st_net *n, struct op *o, const_dnnl_primitive_desc_t pd);
st_status dn_build_relu(st_net *n, int j);
/* An element-wise layer on oneDNN (its forward in training mode, its
 * backward from the source), in its input's layout and type. */
st_status dn_build_eltwise(st_net *n, int j, dnnl_alg_kind_t alg);
st_status dn_build_bn(st_net *n, int j);
st_status dn_build_dropout(st_net *n, int j);
st_status dn_build_flatten(st_net *n, int j);
st_status dn_build_add(st_net *n, int j);
st_status dn_build_input(st_net *n, int j);

/* ---------------------------------------------------- onednn_seq.c -- */

st_status dn_build_embed(st_net *n, int j);
st_status dn_build_ln(st_net *n, int j);
st_status dn_build_gelu(st_net *n, int j);
st_status dn_build_head(st_net *n, int j);
bool dn_seq_linear_fits(const st_net *n, const struct xnode *x);
st_status dn_build_seq_linear(st_net *n, int j);
void dn_seq_free(struct dn_seq_state *s);
/* A sequence layer's plain fp32 rows in and out, and its backward step. */
st_status dn_seq_io(st_net *n, int j, st_status (*bwd)(st_net *, int));
/* The same with the rows out (the output and its gradient) in the type the
 * plan keeps them (x->stored) and in (the input and its gradient) in the
 * type the node computes in (x->compute); an edge of another type is
 * converted on the way. */
st_status dn_seq_io_as_planned(st_net *n, int j, st_status (*bwd)(st_net *, int));
static inline float *dn_seq_src(const struct xnode *x) { return dn_mem_ptr(dn_state(x)->seq.src); }
static inline float *dn_seq_target(const struct xnode *x)
{
    return dn_state(x)->seq.target ? dn_mem_ptr(dn_state(x)->seq.target) : NULL;
}
/* onednn_attention.c: the attention layer and the choice of its kernel. */
st_status dn_build_attention(st_net *n, int j);
void dn_attention_free(struct onednn_net *d);
/* onednn_head.c: the backend's fused loss and full output (struct
 * nn_backend's loss and output), a caller's gradient of the logits for the
 * next backward pass (NULL: the loss made it), and the head's buffers. */
st_status dn_head_loss(st_net *n, const int *labels, int rows, bool gradient, double *row_loss, int *correct);
st_status dn_head_output(st_net *n, float *out);
void dn_head_take_gradient(st_net *n, const float *dy);
void dn_head_free(struct dn_head_state *h);

#endif
