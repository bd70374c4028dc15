/* Internal: the parsed model, a list of nodes in execution order.
 * Every node reads node `in` (and `in2`, for add); shapes are per sample. */
#ifndef SHMTRAIN_NN_MODEL_H
#define SHMTRAIN_NN_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "layers.h"
#include "shmtrain/nn.h"

/* One value per row of the layer table (layers.h). */
typedef enum node_kind {
#define NODE_KIND_VALUE(KIND, ...) NODE_##KIND,
    NN_LAYER_TABLE(NODE_KIND_VALUE)
#undef NODE_KIND_VALUE
    NODE_KINDS
} node_kind;

struct node {
    node_kind kind;
    int line;                 /* source line, for messages */
    int in, in2;              /* producer nodes; -1 if none */
    int out;                  /* conv: out channels; linear: out features */
    int k, s, p;              /* kernel, stride, padding (conv and pools) */
    bool bias, global;
    float drop;
    st_shape shape;           /* output shape per sample, the definition of its size */
    st_dtype dtype;           /* of its output */
    int c, h, w;              /* the image view of `shape`: [c, h, w], or [c] with h = w = 1 */
    bool flat;                /* output is 2-D (N, c) */
    size_t w_off, w_count;    /* weights (conv OIHW, linear OI; bn gamma) in params */
    size_t b_off, b_count;    /* bias (bn beta) */
    size_t buf_off;           /* bn: running mean at buf_off, variance after it */
    int fan_in;
    /* Sequences: an activation [t, c] per sample (t > 0), rows of c features. */
    int t;                    /* positions; 0 for images and flat features */
    bool tokens;              /* input: int32 token ids [t] */
    int vocab;                /* embed: table rows; head: outputs */
    int heads;                /* attention */
    int embed;                /* head: the embed node whose table it shares */
    bool tied;                /* embed: a head reads its table too (its gradient adds in) */
};

struct st_model {
    struct node *nodes;
    int n;
    size_t params, buffers;
    char *text;               /* canonical text */
    char *recipe;             /* the `train` line's "KEY VALUE ...", or NULL (not in the text) */
};

const char *node_kind_name(node_kind k);

/* The presets' names, "mlp, lenet, ...", for messages (model_info.c). */
const char *nn_preset_names(void);

/* The summary line of node i (model_info.c; the layer table's summary column). */
void summary_keyword(const st_model *m, int i, char *desc, size_t len);
void summary_input(const st_model *m, int i, char *desc, size_t len);
void summary_conv(const st_model *m, int i, char *desc, size_t len);
void summary_linear(const st_model *m, int i, char *desc, size_t len);
void summary_pool(const st_model *m, int i, char *desc, size_t len);
void summary_dropout(const st_model *m, int i, char *desc, size_t len);
void summary_add(const st_model *m, int i, char *desc, size_t len);
void summary_embed(const st_model *m, int i, char *desc, size_t len);
void summary_attention(const st_model *m, int i, char *desc, size_t len);
void summary_head(const st_model *m, int i, char *desc, size_t len);

/* The layer table's `flops` column (model_flops.c): a layer's forward
 * floating-point operations per sample. */
double flops_none(const st_model *m, int i);
double flops_weighted(const st_model *m, int i);
double flops_head(const st_model *m, int i);
double flops_attention(const st_model *m, int i);
/* Node i's floating-point operations per sample, forward or backward (with
 * its input's gradient where input_grad). */
double model_layer_flops(const st_model *m, int i, bool backward, bool input_grad);

/* Rows a layer's plain activation has per sample: positions, or 1. */
/* A batch's activation is indexed with int by the kernels: batch x the
 * largest one-sample activation (attention's scores included) must fit. */
#define MODEL_MAX_BATCH_TENSOR ((size_t)2147483647)
size_t model_largest_activation(const st_model *m);

static inline int node_positions(const struct node *nd) { return nd->t > 0 ? nd->t : 1; }

#endif
