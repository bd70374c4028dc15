/* Internal: the model text parser's state and helpers (model_parser.c),
 * shared by model.c (lines and their dispatch through the layer table,
 * saves, blocks, the train line, the public parse and load) and
 * model_lines.c (each layer line's grammar, residual adds included).  A line parser checks its arguments and the shape
 * it receives, appends its node(s) with parser_node, takes its parameters
 * from the flat buffer with parser_params, and writes the canonical line
 * with parser_emit. */
#ifndef SHMTRAIN_NN_MODEL_PARSER_H
#define SHMTRAIN_NN_MODEL_PARSER_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"

#define MAX_TOKENS 32  /* a train line: 12 KEY VALUE pairs and its word */
#define NAME_LEN 32

/* What one model may ask for, refused at the line that asks.  The kernels
 * and the oneDNN descriptors index one tensor (one sample's activation, one
 * layer's weights) with int; the whole model's parameters live in one flat
 * buffer, its gradient in one shared segment and AdamW's two moments beside
 * it: 2^31 - 1 floats is 8 GiB each, room for GPT-2 XL's 1.56e9. */
#define MODEL_MAX_TENSOR ((size_t)2147483647)
#define MODEL_MAX_PARAMS ((size_t)2147483647)

struct parser {
    const char *source;
    int line;
    struct st_model *m;
    int cap;
    char *text;               /* canonical text being built */
    size_t text_len;
    char (*names)[NAME_LEN];  /* saved activations, as many as the model saves */
    int *name_node;
    int nnames, names_cap;
};

/* An ST_ERR_FORMAT status naming the source and line. */
st_status parser_error(const struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends one line to the canonical text. */
st_status parser_emit(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new node after the last (NULL: out of memory), and the last node. */
struct node *parser_node(struct parser *ps, node_kind kind);
const struct node *parser_last(const struct parser *ps);
/* A node whose output is t rows of c features ([T, C]; t = 0: flat [C]). */
struct node *parser_seq_node(struct parser *ps, node_kind kind, int t, int c);
/* A positive integer token, optionally after a one-letter prefix ("k3"). */
bool parser_int(const char *tok, char prefix, int *out);
/* The node's weights and bias, next in the flat parameter buffer; refused
 * past MODEL_MAX_TENSOR / MODEL_MAX_PARAMS. */
st_status parser_params(struct parser *ps, struct node *nd, size_t weights, size_t bias);
/* a * b * c as the size of `what`, refused past MODEL_MAX_TENSOR (no
 * product is formed in int). */
st_status parser_elements(const struct parser *ps, const char *what, size_t a, size_t b, size_t c, size_t *out);

/* The layer keywords' parsers the layer table names (layers.h), one
 * declaration each: a table row naming one that is not here fails to
 * compile model.c (the layer_table ctest entries), and the one line that is
 * not a layer ("block heads H"). */
st_status parse_input(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_add(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_conv(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_pool(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_linear(struct parser *ps, char **tok, int ntok, node_kind kind);
/* The node a `save NAME` named, or -1. */
int parser_find_name(const struct parser *ps, const char *name);

st_status parse_elementwise(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_dropout(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_flatten(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_batchnorm(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_layernorm(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_embed(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_attention(struct parser *ps, char **tok, int ntok, node_kind kind);
st_status parse_head(struct parser *ps, char **tok, int ntok, node_kind kind);

#endif
