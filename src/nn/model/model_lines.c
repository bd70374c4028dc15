/* Each layer line's grammar: its arguments, the input shape it needs, its
 * output shape and parameters (model_parser.h; its helpers are model_parser.c). */
#include <stdlib.h>
#include <string.h>

#include "model_parser.h"

/* -------------------------------------------------------------- images -- */

/* Shared by conv and pools: "kK [sS] [pP]" options after the fixed ones. */
static st_status window_args(struct parser *ps, char **tok, int ntok, int first, struct node *nd,
                             bool allow_nobias)
{
    nd->k = 0;
    nd->s = -1;
    nd->p = 0;
    for (int i = first; i < ntok; i++) {
        int v;
        if (parser_int(tok[i], 'k', &v)) nd->k = v;
        else if (parser_int(tok[i], 's', &v)) nd->s = v;
        else if (parser_int(tok[i], 'p', &v)) nd->p = v;
        else if (allow_nobias && !strcmp(tok[i], "nobias")) nd->bias = false;
        else
            return parser_error(ps, "%s: bad argument '%s' (expected k<size>, s<stride>, p<padding>%s)",
                                tok[0], tok[i], allow_nobias ? " or nobias" : "");
    }
    if (nd->k < 1)
        return parser_error(ps, "%s: missing kernel size (e.g. k3)", tok[0]);
    if (nd->s == 0)
        return parser_error(ps, "%s: stride must be at least 1", tok[0]);
    return ST_OK;
}

static st_status spatial_out(struct parser *ps, struct node *nd, const struct node *src)
{
    if (src->flat)
        return parser_error(ps, "%s needs an image input, but the previous layer's output is flat (%d)",
                            node_kind_name(nd->kind), src->c);
    if (nd->p * 2 >= nd->k && nd->kind != NODE_CONV)
        return parser_error(ps, "%s: padding %d must be less than half the kernel %d", node_kind_name(nd->kind),
                            nd->p, nd->k);
    if (src->h + 2 * nd->p < nd->k || src->w + 2 * nd->p < nd->k)
        return parser_error(ps, "%s: kernel %d is larger than its %dx%d input (padding %d)",
                            node_kind_name(nd->kind), nd->k, src->h, src->w, nd->p);
    nd->h = (src->h + 2 * nd->p - nd->k) / nd->s + 1;
    nd->w = (src->w + 2 * nd->p - nd->k) / nd->s + 1;
    return ST_OK;
}

st_status parse_conv(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int out;
    if (ntok < 2 || !parser_int(tok[1], 0, &out) || out < 1)
        return parser_error(ps, "conv: first argument must be the number of output channels (e.g. conv 32 k3)");
    const struct node *src = parser_last(ps);
    struct node *nd = parser_node(ps, NODE_CONV);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->out = out;
    nd->bias = true;
    st_status st = window_args(ps, tok, ntok, 2, nd, true);
    if (st != ST_OK)
        return st;
    if (nd->s < 0)
        nd->s = 1;
    src = &ps->m->nodes[nd->in];
    if ((st = spatial_out(ps, nd, src)) != ST_OK)
        return st;
    nd->c = out;
    size_t fan_in, weights;
    if ((st = parser_elements(ps, "conv: a filter", (size_t)src->c, (size_t)nd->k, (size_t)nd->k, &fan_in)) != ST_OK ||
        (st = parser_elements(ps, "conv: the weights", (size_t)out, fan_in, 1, &weights)) != ST_OK ||
        (st = parser_params(ps, nd, weights, nd->bias ? (size_t)out : 0)) != ST_OK)
        return st;
    nd->fan_in = (int)fan_in;
    return parser_emit(ps, "conv %d k%d s%d p%d%s", out, nd->k, nd->s, nd->p, nd->bias ? "" : " nobias");
}

st_status parse_pool(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    struct node *nd = parser_node(ps, kind);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    const struct node *src = &ps->m->nodes[nd->in];
    if (kind == NODE_AVGPOOL && ntok == 2 && !strcmp(tok[1], "global")) {
        if (src->flat)
            return parser_error(ps, "avgpool needs an image input, but the previous layer's output is flat");
        nd->global = true;
        nd->k = src->h;  /* square kernel not required: h and w are kept apart below */
        nd->s = 1;
        nd->h = nd->w = 1;
        nd->c = src->c;
        return parser_emit(ps, "avgpool global");
    }
    st_status st = window_args(ps, tok, ntok, 1, nd, false);
    if (st != ST_OK)
        return st;
    if (nd->s < 0)
        nd->s = nd->k;
    if ((st = spatial_out(ps, nd, src)) != ST_OK)
        return st;
    nd->c = src->c;
    return parser_emit(ps, "%s k%d s%d p%d", tok[0], nd->k, nd->s, nd->p);
}

/* The source's shape is copied before parser_node: appending may move the
 * node array, and a pointer into it with it. */
static st_status add_flatten_if_needed(struct parser *ps)
{
    const struct node src = *parser_last(ps);
    if (src.flat)
        return ST_OK;
    size_t features;
    st_status st = parser_elements(ps, "flatten", (size_t)src.c, (size_t)src.h, (size_t)src.w, &features);
    if (st != ST_OK)
        return st;
    struct node *nd = parser_node(ps, NODE_FLATTEN);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->c = (int)features;
    nd->h = nd->w = 1;
    nd->flat = true;
    return ST_OK;
}

st_status parse_linear(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int out;
    bool bias = true;
    if (ntok < 2 || !parser_int(tok[1], 0, &out) || out < 1)
        return parser_error(ps, "linear: first argument must be the number of outputs (e.g. linear 10)");
    for (int i = 2; i < ntok; i++) {
        if (strcmp(tok[i], "nobias"))
            return parser_error(ps, "linear: bad argument '%s' (only nobias may follow)", tok[i]);
        bias = false;
    }
    st_status st = add_flatten_if_needed(ps);
    if (st != ST_OK)
        return st;
    int in_features = parser_last(ps)->c, t = parser_last(ps)->t;
    struct node *nd = parser_node(ps, NODE_LINEAR);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->t = t;  /* on a sequence: the same map at every position */
    nd->out = nd->c = out;
    nd->h = nd->w = 1;
    nd->flat = true;
    nd->bias = bias;
    nd->fan_in = in_features;
    size_t weights;
    if ((st = parser_elements(ps, "linear: the weights", (size_t)out, (size_t)in_features, 1, &weights)) != ST_OK ||
        (st = parser_params(ps, nd, weights, bias ? (size_t)out : 0)) != ST_OK)
        return st;
    return parser_emit(ps, "linear %d%s", out, bias ? "" : " nobias");
}

/* A layer of the previous one's shape: its node, or NULL (out of memory). */
static struct node *same_shape(struct parser *ps, node_kind kind)
{
    const struct node *src = parser_last(ps);
    const int c = src->c, h = src->h, w = src->w, t = src->t;
    const bool flat = src->flat;
    struct node *nd = parser_node(ps, kind);
    if (nd) {
        nd->c = c, nd->h = h, nd->w = w, nd->t = t;
        nd->flat = flat;
    }
    return nd;
}

/* relu, gelu: element-wise, no arguments. */
st_status parse_elementwise(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    if (ntok != 1)
        return parser_error(ps, "%s: takes no arguments", tok[0]);
    return same_shape(ps, kind) ? parser_emit(ps, "%s", tok[0]) : st_fail(ST_ERR_NOMEM, "model: out of memory");
}

/* dropout P: zero each element with probability P while training. */
st_status parse_dropout(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    if (ntok != 2)
        return parser_error(ps, "dropout: needs one probability (dropout 0.5)");
    char *end;
    const float drop = strtof(tok[1], &end);
    if (*end || !(drop >= 0 && drop < 1))
        return parser_error(ps, "dropout: probability '%s' must be a number in [0, 1)", tok[1]);
    struct node *nd = same_shape(ps, kind);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->drop = drop;
    return parser_emit(ps, "dropout %g", (double)drop);
}

/* flatten, written out: a model may end with it (the implicit one before
 * linear is not). */
st_status parse_flatten(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    if (ntok != 1)
        return parser_error(ps, "%s: takes no arguments", tok[0]);
    if (parser_last(ps)->flat)
        return parser_error(ps, "flatten: the input is already flat");
    st_status st = add_flatten_if_needed(ps);
    return st != ST_OK ? st : parser_emit(ps, "flatten");
}

/* batchnorm: per channel of an image, a scale and shift learned and the
 * running mean and variance kept (buffers). */
st_status parse_batchnorm(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    if (ntok != 1)
        return parser_error(ps, "%s: takes no arguments", tok[0]);
    if (parser_last(ps)->flat)
        return parser_error(ps, "batchnorm (2-d) needs an image input, but the previous layer's output is flat");
    struct node *nd = same_shape(ps, kind);
    st_status st = nd ? parser_params(ps, nd, (size_t)nd->c, (size_t)nd->c)
                      : st_fail(ST_ERR_NOMEM, "model: out of memory");
    if (st != ST_OK)
        return st;
    nd->buf_off = ps->m->buffers;
    ps->m->buffers += 2 * (size_t)nd->c;
    return parser_emit(ps, "batchnorm");
}

/* layernorm: over the features of each position (or of a flat sample). */
st_status parse_layernorm(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    if (ntok != 1)
        return parser_error(ps, "%s: takes no arguments", tok[0]);
    if (!parser_last(ps)->flat)
        return parser_error(ps, "layernorm normalises features ([T, C] or flat), but the previous layer's output is an "
                            "image (use batchnorm)");
    struct node *nd = same_shape(ps, kind);
    st_status st = nd ? parser_params(ps, nd, (size_t)nd->c, (size_t)nd->c)
                      : st_fail(ST_ERR_NOMEM, "model: out of memory");
    return st != ST_OK ? st : parser_emit(ps, "layernorm");
}

/* ------------------------------------------------------- transformers -- */

/* embed VOCAB DIM: token table [VOCAB, DIM] then learned positions [T, DIM],
 * summed: the token ids' embeddings. */
st_status parse_embed(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int vocab, dim;
    if (ntok != 3 || !parser_int(tok[1], 0, &vocab) || !parser_int(tok[2], 0, &dim) || vocab < 1 || dim < 1)
        return parser_error(ps, "embed: expected 'embed VOCAB DIM' (e.g. embed 256 128)");
    const struct node *src = parser_last(ps);
    if (!src->tokens)
        return parser_error(ps, "embed must follow 'input tokens T' (it reads token ids)");
    for (int i = 0; i < ps->m->n; i++)
        if (ps->m->nodes[i].kind == NODE_EMBED)
            return parser_error(ps, "embed: a model has one token embedding");
    const int t = src->t;
    struct node *nd = parser_seq_node(ps, NODE_EMBED, t, dim);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->vocab = vocab;
    size_t table, positions;  /* "bias": the position table */
    st_status st;
    if ((st = parser_elements(ps, "embed: the token table", (size_t)vocab, (size_t)dim, 1, &table)) != ST_OK ||
        (st = parser_elements(ps, "embed: the position table", (size_t)t, (size_t)dim, 1, &positions)) != ST_OK ||
        (st = parser_params(ps, nd, table, positions)) != ST_OK)
        return st;
    return parser_emit(ps, "embed %d %d", vocab, dim);
}

/* attention heads H: causal multi-head self-attention on [T, 3C] (q, k, v
 * side by side, each head a slice of C/H) -> [T, C]. */
st_status parse_attention(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int heads;
    if (ntok != 3 || strcmp(tok[1], "heads") || !parser_int(tok[2], 0, &heads) || heads < 1)
        return parser_error(ps, "attention: expected 'attention heads H'");
    const struct node *src = parser_last(ps);
    if (src->t < 1 || src->c % 3 || (src->c / 3) % heads)
        return parser_error(ps, "attention heads %d needs a [T, 3C] input with C a multiple of %d (q, k, v from one "
                            "'linear 3C'); the input is %dx%d", heads, heads, src->t, src->c);
    const int t = src->t, c = src->c / 3;
    size_t scores;  /* a sample's attention probabilities, kept for the backward pass */
    st_status st = parser_elements(ps, "attention: the scores", (size_t)heads, (size_t)t, (size_t)t, &scores);
    if (st != ST_OK)
        return st;
    struct node *nd = parser_seq_node(ps, NODE_ATTENTION, t, c);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->heads = heads;
    return parser_emit(ps, "attention heads %d", heads);
}

/* head tied: the language-model head, logits [T, VOCAB] = x E^T with the
 * embed's token table E (its gradient adds into E's). */
st_status parse_head(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    if (ntok != 2 || strcmp(tok[1], "tied"))
        return parser_error(ps, "head: expected 'head tied' (an untied head is 'linear VOCAB nobias')");
    int e = -1;
    for (int i = 0; i < ps->m->n; i++)
        if (ps->m->nodes[i].kind == NODE_EMBED)
            e = i;
    const struct node *src = parser_last(ps);
    if (e < 0)
        return parser_error(ps, "head tied: no 'embed' layer to tie to");
    struct node *emb = &ps->m->nodes[e];
    if (src->t < 1 || src->c != emb->c)
        return parser_error(ps, "head tied: the input must be [T, %d] (the embedding's width), not %dx%d", emb->c,
                            src->t, src->c);
    emb->tied = true;
    const int t = src->t, vocab = emb->vocab;
    struct node *nd = parser_seq_node(ps, NODE_HEAD, t, vocab);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->embed = e;
    nd->vocab = vocab;
    return parser_emit(ps, "head tied");
}

/* --------------------------------------------------- input, residuals -- */

static st_status add_features(struct parser *ps, const char *name, int main_in, int skip, bool proj);

st_status parse_add(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    bool proj = ntok == 3 && !strcmp(tok[2], "proj");
    if (ntok < 2 || ntok > 3 || (ntok == 3 && !proj))
        return parser_error(ps, "add: use 'add NAME' or 'add NAME proj'");
    int k = parser_find_name(ps, tok[1]);
    if (k < 0)
        return parser_error(ps, "add: no activation was saved as '%s' (use 'save %s' earlier)", tok[1], tok[1]);
    int main_in = ps->m->n - 1, skip = ps->name_node[k];
    const struct node a = ps->m->nodes[main_in], b = ps->m->nodes[skip];
    if (a.flat || b.flat)
        return add_features(ps, tok[1], main_in, skip, proj);
    if (proj) {
        int stride = b.h / a.h;
        if (stride < 1 || (b.h + stride - 1) / stride != a.h || (b.w + stride - 1) / stride != a.w)
            return parser_error(ps, "add %s proj: cannot map %dx%d onto %dx%d with a strided 1x1 convolution",
                                tok[1], b.h, b.w, a.h, a.w);
        struct node *pj = parser_node(ps, NODE_CONV);
        if (!pj)
            return st_fail(ST_ERR_NOMEM, "model: out of memory");
        pj->in = skip;
        pj->out = pj->c = a.c;
        pj->k = 1;
        pj->s = stride;
        pj->p = 0;
        pj->bias = true;
        pj->h = a.h;
        pj->w = a.w;
        pj->fan_in = b.c;
        st_status st = parser_params(ps, pj, (size_t)a.c * (size_t)b.c, (size_t)a.c);
        if (st != ST_OK)
            return st;
        skip = ps->m->n - 1;
    } else if (a.c != b.c || a.h != b.h || a.w != b.w) {
        return parser_error(ps, "add %s: shapes differ (%dx%dx%d saved, %dx%dx%d here); use 'add %s proj'",
                            tok[1], b.c, b.h, b.w, a.c, a.h, a.w, tok[1]);
    }
    struct node *nd = parser_node(ps, NODE_ADD);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->in = main_in;
    nd->in2 = skip;
    nd->c = a.c;
    nd->h = a.h;
    nd->w = a.w;
    return parser_emit(ps, "add %s%s", tok[1], proj ? " proj" : "");
}

/* A residual connection between feature tensors ([T, C] or flat): shapes
 * must agree, there is no projection. */
static st_status add_features(struct parser *ps, const char *name, int main_in, int skip, bool proj)
{
    const struct node a = ps->m->nodes[main_in], b = ps->m->nodes[skip];
    if (proj || !a.flat || !b.flat || a.c != b.c || a.t != b.t) {
        char as[32], bs[32];
        st_shape_str(&a.shape, as, sizeof as);
        st_shape_str(&b.shape, bs, sizeof bs);
        return parser_error(ps, "add %s%s: shapes must be equal and both features or both images (%s saved, %s here)%s",
                            name, proj ? " proj" : "", bs, as, proj ? "; proj is for images" : "");
    }
    struct node *nd = parser_seq_node(ps, NODE_ADD, a.t, a.c);  /* flat features are t = 0 */
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->in = main_in;
    nd->in2 = skip;
    return parser_emit(ps, "add %s", name);
}

st_status parse_input(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int c, h = 1, w = 1;
    if (ps->m->n > 0)
        return parser_error(ps, "input: declared twice (only the first line may be 'input')");
    if (ntok >= 2 && !strcmp(tok[1], "tokens")) {
        int t;
        if (ntok != 3 || !parser_int(tok[2], 0, &t) || t < 1)
            return parser_error(ps, "input tokens: expected 'input tokens CONTEXT' (e.g. input tokens 64)");
        struct node *nd = parser_node(ps, NODE_INPUT);
        if (!nd)
            return st_fail(ST_ERR_NOMEM, "model: out of memory");
        nd->in = -1;
        nd->tokens = true;
        nd->t = t;
        nd->c = nd->h = nd->w = 1;
        nd->flat = true;
        return parser_emit(ps, "input tokens %d", t);
    }
    if ((ntok != 4 && ntok != 2) || !parser_int(tok[1], 0, &c) || c < 1 ||
        (ntok == 4 && (!parser_int(tok[2], 0, &h) || !parser_int(tok[3], 0, &w) || h < 1 || w < 1)))
        return parser_error(ps, "input: expected 'input CHANNELS HEIGHT WIDTH' (e.g. input 1 28 28)");
    struct node *nd = parser_node(ps, NODE_INPUT);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->in = -1;
    nd->c = c;
    nd->h = h;
    nd->w = w;
    return parser_emit(ps, "input %d %d %d", c, h, w);
}
