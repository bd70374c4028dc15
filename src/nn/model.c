/* Model text: parsing, shape inference, parameter layout (the presets, the
 * accessors and the summary are in model_info.c). */
#define _GNU_SOURCE
#include "model.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *node_kind_name(node_kind k)
{
    static const char *const names[] = {
#define KEYWORD(KIND, keyword, ...) [NODE_##KIND] = keyword,
        NN_LAYER_TABLE(KEYWORD)
#undef KEYWORD
    };
    _Static_assert(sizeof names / sizeof *names == NODE_KINDS, "a keyword per layer kind");
    return k < NODE_KINDS ? names[k] : "?";
}

/* ------------------------------------------------------------- parsing -- */

#define MAX_TOKENS 8
#define MAX_NAMES 64

struct parser {
    const char *source;
    int line;
    struct st_model *m;
    int cap;
    char *text;               /* canonical text being built */
    size_t text_len;
    char names[MAX_NAMES][32];
    int name_node[MAX_NAMES];
    int nnames;
};

static st_status perr(const struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static st_status perr(const struct parser *ps, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return st_fail(ST_ERR_FORMAT, "%s:%d: %s", ps->source, ps->line, msg);
}

static st_status emit(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static st_status emit(struct parser *ps, const char *fmt, ...)
{
    char line[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char *t = realloc(ps->text, ps->text_len + (size_t)n + 2);
    if (!t)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    memcpy(t + ps->text_len, line, (size_t)n);
    ps->text_len += (size_t)n;
    t[ps->text_len++] = '\n';
    t[ps->text_len] = '\0';
    ps->text = t;
    return ST_OK;
}

static struct node *add_node(struct parser *ps, node_kind kind)
{
    struct st_model *m = ps->m;
    if (m->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 16;
        struct node *v = realloc(m->nodes, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
        m->nodes = v;
        ps->cap = cap;
    }
    struct node *nd = &m->nodes[m->n];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->line = ps->line;
    nd->in = m->n - 1;
    nd->in2 = -1;
    m->n++;
    return nd;
}

static const struct node *last(const struct parser *ps) { return &ps->m->nodes[ps->m->n - 1]; }

/* A node whose output is t rows of c features ([T, C]; t = 0: flat [C]). */
static struct node *add_seq_node(struct parser *ps, node_kind kind, int t, int c)
{
    struct node *nd = add_node(ps, kind);
    if (nd) {
        nd->t = t;
        nd->c = c;
        nd->h = nd->w = 1;
        nd->flat = true;
    }
    return nd;
}

/* A positive integer token, optionally after a one-letter prefix ("k3"). */
static bool int_arg(const char *tok, char prefix, int *out)
{
    if (prefix) {
        if (tok[0] != prefix)
            return false;
        tok++;
    }
    if (!isdigit((unsigned char)tok[0]))
        return false;
    char *end;
    errno = 0;
    long v = strtol(tok, &end, 10);
    if (errno || *end || v > 1000000)
        return false;
    *out = (int)v;
    return true;
}

/* Shared by conv and pools: "kK [sS] [pP]" options after the fixed ones. */
static st_status window_args(struct parser *ps, char **tok, int ntok, int first, struct node *nd,
                             bool allow_nobias)
{
    nd->k = 0;
    nd->s = -1;
    nd->p = 0;
    for (int i = first; i < ntok; i++) {
        int v;
        if (int_arg(tok[i], 'k', &v)) nd->k = v;
        else if (int_arg(tok[i], 's', &v)) nd->s = v;
        else if (int_arg(tok[i], 'p', &v)) nd->p = v;
        else if (allow_nobias && !strcmp(tok[i], "nobias")) nd->bias = false;
        else
            return perr(ps, "%s: bad argument '%s' (expected k<size>, s<stride>, p<padding>%s)",
                        tok[0], tok[i], allow_nobias ? " or nobias" : "");
    }
    if (nd->k < 1)
        return perr(ps, "%s: missing kernel size (e.g. k3)", tok[0]);
    if (nd->s == 0)
        return perr(ps, "%s: stride must be at least 1", tok[0]);
    return ST_OK;
}

static st_status spatial_out(struct parser *ps, struct node *nd, const struct node *src)
{
    if (src->flat)
        return perr(ps, "%s needs an image input, but the previous layer's output is flat (%d)",
                    node_kind_name(nd->kind), src->c);
    if (nd->p * 2 >= nd->k && nd->kind != NODE_CONV)
        return perr(ps, "%s: padding %d must be less than half the kernel %d", node_kind_name(nd->kind),
                    nd->p, nd->k);
    if (src->h + 2 * nd->p < nd->k || src->w + 2 * nd->p < nd->k)
        return perr(ps, "%s: kernel %d is larger than its %dx%d input (padding %d)",
                    node_kind_name(nd->kind), nd->k, src->h, src->w, nd->p);
    nd->h = (src->h + 2 * nd->p - nd->k) / nd->s + 1;
    nd->w = (src->w + 2 * nd->p - nd->k) / nd->s + 1;
    return ST_OK;
}

static void take_params(struct parser *ps, struct node *nd, size_t weights, size_t bias)
{
    nd->w_off = ps->m->params;
    nd->w_count = weights;
    nd->b_off = nd->w_off + weights;
    nd->b_count = bias;
    ps->m->params += weights + bias;
}

static st_status parse_conv(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int out;
    if (ntok < 2 || !int_arg(tok[1], 0, &out) || out < 1)
        return perr(ps, "conv: first argument must be the number of output channels (e.g. conv 32 k3)");
    const struct node *src = last(ps);
    struct node *nd = add_node(ps, NODE_CONV);
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
    nd->fan_in = src->c * nd->k * nd->k;
    take_params(ps, nd, (size_t)out * (size_t)nd->fan_in, nd->bias ? (size_t)out : 0);
    return emit(ps, "conv %d k%d s%d p%d%s", out, nd->k, nd->s, nd->p, nd->bias ? "" : " nobias");
}

static st_status parse_pool(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    struct node *nd = add_node(ps, kind);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    const struct node *src = &ps->m->nodes[nd->in];
    if (kind == NODE_AVGPOOL && ntok == 2 && !strcmp(tok[1], "global")) {
        if (src->flat)
            return perr(ps, "avgpool needs an image input, but the previous layer's output is flat");
        nd->global = true;
        nd->k = src->h;  /* square kernel not required: h and w are kept apart below */
        nd->s = 1;
        nd->h = nd->w = 1;
        nd->c = src->c;
        return emit(ps, "avgpool global");
    }
    st_status st = window_args(ps, tok, ntok, 1, nd, false);
    if (st != ST_OK)
        return st;
    if (nd->s < 0)
        nd->s = nd->k;
    if ((st = spatial_out(ps, nd, src)) != ST_OK)
        return st;
    nd->c = src->c;
    return emit(ps, "%s k%d s%d p%d", tok[0], nd->k, nd->s, nd->p);
}

static st_status add_flatten_if_needed(struct parser *ps)
{
    const struct node *src = last(ps);
    if (src->flat)
        return ST_OK;
    struct node *nd = add_node(ps, NODE_FLATTEN);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->c = src->c * src->h * src->w;
    nd->h = nd->w = 1;
    nd->flat = true;
    return ST_OK;
}

static st_status parse_linear(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int out;
    bool bias = true;
    if (ntok < 2 || !int_arg(tok[1], 0, &out) || out < 1)
        return perr(ps, "linear: first argument must be the number of outputs (e.g. linear 10)");
    for (int i = 2; i < ntok; i++) {
        if (strcmp(tok[i], "nobias"))
            return perr(ps, "linear: bad argument '%s' (only nobias may follow)", tok[i]);
        bias = false;
    }
    st_status st = add_flatten_if_needed(ps);
    if (st != ST_OK)
        return st;
    int in_features = last(ps)->c, t = last(ps)->t;
    struct node *nd = add_node(ps, NODE_LINEAR);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->t = t;  /* on a sequence: the same map at every position */
    nd->out = nd->c = out;
    nd->h = nd->w = 1;
    nd->flat = true;
    nd->bias = bias;
    nd->fan_in = in_features;
    take_params(ps, nd, (size_t)out * (size_t)in_features, bias ? (size_t)out : 0);
    return emit(ps, "linear %d%s", out, bias ? "" : " nobias");
}

static st_status parse_simple(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    if (kind == NODE_DROPOUT ? ntok != 2 : ntok != 1)
        return perr(ps, "%s: %s", tok[0], kind == NODE_DROPOUT ? "needs one probability (dropout 0.5)"
                                                              : "takes no arguments");
    const struct node *src = last(ps);
    if (kind == NODE_BATCHNORM && src->flat)
        return perr(ps, "batchnorm (2-d) needs an image input, but the previous layer's output is flat");
    if (kind == NODE_LAYERNORM && !src->flat)
        return perr(ps, "layernorm normalises features ([T, C] or flat), but the previous layer's output is an "
                        "image (use batchnorm)");
    if (kind == NODE_FLATTEN)
        return src->flat ? perr(ps, "flatten: the input is already flat") : add_flatten_if_needed(ps);
    float drop = 0;
    if (kind == NODE_DROPOUT) {
        char *end;
        drop = strtof(tok[1], &end);
        if (*end || !(drop >= 0 && drop < 1))
            return perr(ps, "dropout: probability '%s' must be a number in [0, 1)", tok[1]);
    }
    int c = src->c, h = src->h, w = src->w, t = src->t;
    bool flat = src->flat;
    struct node *nd = add_node(ps, kind);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->c = c;
    nd->h = h;
    nd->w = w;
    nd->t = t;
    nd->flat = flat;
    nd->drop = drop;
    if (kind == NODE_LAYERNORM) {
        take_params(ps, nd, (size_t)c, (size_t)c);
        return emit(ps, "layernorm");
    }
    if (kind == NODE_BATCHNORM) {
        take_params(ps, nd, (size_t)c, (size_t)c);
        nd->buf_off = ps->m->buffers;
        ps->m->buffers += 2 * (size_t)c;
        return emit(ps, "batchnorm");
    }
    return kind == NODE_DROPOUT ? emit(ps, "dropout %g", (double)drop) : emit(ps, "%s", tok[0]);
}

static int find_name(const struct parser *ps, const char *name)
{
    for (int i = 0; i < ps->nnames; i++)
        if (!strcmp(ps->names[i], name))
            return i;
    return -1;
}

static st_status parse_save(struct parser *ps, char **tok, int ntok)
{
    if (ntok != 2 || strlen(tok[1]) >= sizeof ps->names[0])
        return perr(ps, "save: needs one short name (save b0)");
    if (find_name(ps, tok[1]) >= 0)
        return perr(ps, "save: name '%s' is already used", tok[1]);
    if (ps->nnames == MAX_NAMES)
        return perr(ps, "save: too many names");
    snprintf(ps->names[ps->nnames], sizeof ps->names[0], "%s", tok[1]);
    ps->name_node[ps->nnames++] = ps->m->n - 1;
    return emit(ps, "save %s", tok[1]);
}

static st_status add_features(struct parser *ps, const char *name, int main_in, int skip, bool proj);

static st_status parse_add(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    bool proj = ntok == 3 && !strcmp(tok[2], "proj");
    if (ntok < 2 || ntok > 3 || (ntok == 3 && !proj))
        return perr(ps, "add: use 'add NAME' or 'add NAME proj'");
    int k = find_name(ps, tok[1]);
    if (k < 0)
        return perr(ps, "add: no activation was saved as '%s' (use 'save %s' earlier)", tok[1], tok[1]);
    int main_in = ps->m->n - 1, skip = ps->name_node[k];
    const struct node a = ps->m->nodes[main_in], b = ps->m->nodes[skip];
    if (a.flat || b.flat)
        return add_features(ps, tok[1], main_in, skip, proj);
    if (proj) {
        int stride = b.h / a.h;
        if (stride < 1 || (b.h + stride - 1) / stride != a.h || (b.w + stride - 1) / stride != a.w)
            return perr(ps, "add %s proj: cannot map %dx%d onto %dx%d with a strided 1x1 convolution",
                        tok[1], b.h, b.w, a.h, a.w);
        struct node *pj = add_node(ps, NODE_CONV);
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
        take_params(ps, pj, (size_t)a.c * (size_t)b.c, (size_t)a.c);
        skip = ps->m->n - 1;
    } else if (a.c != b.c || a.h != b.h || a.w != b.w) {
        return perr(ps, "add %s: shapes differ (%dx%dx%d saved, %dx%dx%d here); use 'add %s proj'",
                    tok[1], b.c, b.h, b.w, a.c, a.h, a.w, tok[1]);
    }
    struct node *nd = add_node(ps, NODE_ADD);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->in = main_in;
    nd->in2 = skip;
    nd->c = a.c;
    nd->h = a.h;
    nd->w = a.w;
    return emit(ps, "add %s%s", tok[1], proj ? " proj" : "");
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
        return perr(ps, "add %s%s: shapes must be equal and both features or both images (%s saved, %s here)%s",
                    name, proj ? " proj" : "", bs, as, proj ? "; proj is for images" : "");
    }
    struct node *nd = add_seq_node(ps, NODE_ADD, a.t, a.c);  /* flat features are t = 0 */
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->in = main_in;
    nd->in2 = skip;
    return emit(ps, "add %s", name);
}

/* ------------------------------------------------------- transformers -- */

/* embed VOCAB DIM: token table [VOCAB, DIM] then learned positions [T, DIM],
 * summed: the token ids' embeddings. */
static st_status parse_embed(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int vocab, dim;
    if (ntok != 3 || !int_arg(tok[1], 0, &vocab) || !int_arg(tok[2], 0, &dim) || vocab < 1 || dim < 1)
        return perr(ps, "embed: expected 'embed VOCAB DIM' (e.g. embed 256 128)");
    const struct node *src = last(ps);
    if (!src->tokens)
        return perr(ps, "embed must follow 'input tokens T' (it reads token ids)");
    for (int i = 0; i < ps->m->n; i++)
        if (ps->m->nodes[i].kind == NODE_EMBED)
            return perr(ps, "embed: a model has one token embedding");
    const int t = src->t;
    struct node *nd = add_seq_node(ps, NODE_EMBED, t, dim);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->vocab = vocab;
    take_params(ps, nd, (size_t)vocab * dim, (size_t)t * dim);  /* "bias": the position table */
    return emit(ps, "embed %d %d", vocab, dim);
}

/* attention heads H: causal multi-head self-attention on [T, 3C] (q, k, v
 * side by side, each head a slice of C/H) -> [T, C]. */
static st_status parse_attention(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int heads;
    if (ntok != 3 || strcmp(tok[1], "heads") || !int_arg(tok[2], 0, &heads) || heads < 1)
        return perr(ps, "attention: expected 'attention heads H'");
    const struct node *src = last(ps);
    if (src->t < 1 || src->c % 3 || (src->c / 3) % heads)
        return perr(ps, "attention heads %d needs a [T, 3C] input with C a multiple of %d (q, k, v from one "
                        "'linear 3C'); the input is %dx%d", heads, heads, src->t, src->c);
    const int t = src->t, c = src->c / 3;
    struct node *nd = add_seq_node(ps, NODE_ATTENTION, t, c);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->heads = heads;
    return emit(ps, "attention heads %d", heads);
}

/* head tied: the language-model head, logits [T, VOCAB] = x E^T with the
 * embed's token table E (its gradient adds into E's). */
static st_status parse_head(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    if (ntok != 2 || strcmp(tok[1], "tied"))
        return perr(ps, "head: expected 'head tied' (an untied head is 'linear VOCAB nobias')");
    int e = -1;
    for (int i = 0; i < ps->m->n; i++)
        if (ps->m->nodes[i].kind == NODE_EMBED)
            e = i;
    const struct node *src = last(ps);
    if (e < 0)
        return perr(ps, "head tied: no 'embed' layer to tie to");
    struct node *emb = &ps->m->nodes[e];
    if (src->t < 1 || src->c != emb->c)
        return perr(ps, "head tied: the input must be [T, %d] (the embedding's width), not %dx%d", emb->c, src->t,
                    src->c);
    emb->tied = true;
    const int t = src->t, vocab = emb->vocab;
    struct node *nd = add_seq_node(ps, NODE_HEAD, t, vocab);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->embed = e;
    nd->vocab = vocab;
    return emit(ps, "head tied");
}

static st_status parse_line(struct parser *ps, char *line);

/* block heads H: one pre-norm transformer block (GPT-2's), as its parts. */
static st_status parse_block(struct parser *ps, char **tok, int ntok)
{
    int heads;
    if (ntok != 3 || strcmp(tok[1], "heads") || !int_arg(tok[2], 0, &heads) || heads < 1)
        return perr(ps, "block: expected 'block heads H'");
    const struct node *src = last(ps);
    if (src->t < 1)
        return perr(ps, "block: needs a [T, C] sequence input (after embed)");
    const int c = src->c, id = ps->nnames;
    char lines[12][48];
    snprintf(lines[0], sizeof lines[0], "save _b%d_attn", id);
    snprintf(lines[1], sizeof lines[1], "layernorm");
    snprintf(lines[2], sizeof lines[2], "linear %d", 3 * c);
    snprintf(lines[3], sizeof lines[3], "attention heads %d", heads);
    snprintf(lines[4], sizeof lines[4], "linear %d", c);
    snprintf(lines[5], sizeof lines[5], "add _b%d_attn", id);
    snprintf(lines[6], sizeof lines[6], "save _b%d_mlp", id);
    snprintf(lines[7], sizeof lines[7], "layernorm");
    snprintf(lines[8], sizeof lines[8], "linear %d", 4 * c);
    snprintf(lines[9], sizeof lines[9], "gelu");
    snprintf(lines[10], sizeof lines[10], "linear %d", c);
    snprintf(lines[11], sizeof lines[11], "add _b%d_mlp", id);
    for (int i = 0; i < 12; i++) {
        st_status st = parse_line(ps, lines[i]);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

static st_status parse_input(struct parser *ps, char **tok, int ntok, node_kind kind)
{
    (void)kind;
    int c, h = 1, w = 1;
    if (ps->m->n > 0)
        return perr(ps, "input: declared twice (only the first line may be 'input')");
    if (ntok >= 2 && !strcmp(tok[1], "tokens")) {
        int t;
        if (ntok != 3 || !int_arg(tok[2], 0, &t) || t < 1)
            return perr(ps, "input tokens: expected 'input tokens CONTEXT' (e.g. input tokens 64)");
        struct node *nd = add_node(ps, NODE_INPUT);
        if (!nd)
            return st_fail(ST_ERR_NOMEM, "model: out of memory");
        nd->in = -1;
        nd->tokens = true;
        nd->t = t;
        nd->c = nd->h = nd->w = 1;
        nd->flat = true;
        return emit(ps, "input tokens %d", t);
    }
    if ((ntok != 4 && ntok != 2) || !int_arg(tok[1], 0, &c) || c < 1 ||
        (ntok == 4 && (!int_arg(tok[2], 0, &h) || !int_arg(tok[3], 0, &w) || h < 1 || w < 1)))
        return perr(ps, "input: expected 'input CHANNELS HEIGHT WIDTH' (e.g. input 1 28 28)");
    struct node *nd = add_node(ps, NODE_INPUT);
    if (!nd)
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    nd->in = -1;
    nd->c = c;
    nd->h = h;
    nd->w = w;
    return emit(ps, "input %d %d %d", c, h, w);
}

static st_status parse_line(struct parser *ps, char *line)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *tok[MAX_TOKENS + 1], *save = NULL;
    int ntok = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (ntok == MAX_TOKENS)
            return perr(ps, "too many arguments");
        tok[ntok++] = t;
    }
    if (ntok == 0)
        return ST_OK;
    if (!strcmp(tok[0], "save"))
        return ps->m->n == 0 ? perr(ps, "the first layer must be 'input C H W', not 'save'") : parse_save(ps, tok, ntok);
    if (!strcmp(tok[0], "block"))
        return ps->m->n == 0 ? perr(ps, "the first layer must be 'input ...', not 'block'") : parse_block(ps, tok, ntok);
    if (ps->m->n > 0 && last(ps)->tokens && strcmp(tok[0], "embed"))
        return perr(ps, "%s: token ids must go through 'embed VOCAB DIM' first", tok[0]);
    static const struct {
        const char *keyword;
        st_status (*parse)(struct parser *ps, char **tok, int ntok, node_kind kind);
    } kinds[] = {
#define PARSER(KIND, keyword, parse, ...) [NODE_##KIND] = {keyword, parse},
        NN_LAYER_TABLE(PARSER)
#undef PARSER
    };
    _Static_assert(sizeof kinds / sizeof *kinds == NODE_KINDS, "a parser per layer kind");
    for (int k = 0; k < NODE_KINDS; k++) {
        if (strcmp(tok[0], kinds[k].keyword) != 0)
            continue;
        if (ps->m->n == 0 && k != NODE_INPUT)
            return perr(ps, "the first layer must be 'input C H W', not '%s'", tok[0]);
        return kinds[k].parse(ps, tok, ntok, (node_kind)k);
    }
    char known[256] = "";
    size_t len = 0;
    for (int k = 0; k < NODE_KINDS; k++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s ", kinds[k].keyword);
    return perr(ps, "unknown layer '%s' (known: %ssave block)", tok[0], known);
}

/* The layers still describe their output as c, h, w (or c, flat); the
 * shape every size is computed from is set from that once per node. */
static void set_shape(struct node *nd)
{
    nd->dtype = nd->tokens ? ST_DTYPE_I32 : ST_DTYPE_F32;
    if (nd->tokens)
        nd->shape = (st_shape){1, {nd->t}};
    else if (nd->t > 0)
        nd->shape = (st_shape){2, {nd->t, nd->c}};
    else
        nd->shape = nd->flat ? (st_shape){1, {nd->c}} : (st_shape){3, {nd->c, nd->h, nd->w}};
}

st_status st_model_parse(st_model **out, const char *text, const char *source)
{
    *out = NULL;
    struct parser ps = {.source = source ? source : "model"};
    ps.m = calloc(1, sizeof *ps.m);
    char *copy = strdup(text ? text : "");
    st_status st = ST_OK;
    if (!ps.m || !copy) {
        st = st_fail(ST_ERR_NOMEM, "model: out of memory");
        goto out;
    }
    char *save = NULL;
    ps.line = 0;
    for (char *p = copy, *nl; p && st == ST_OK; p = nl) {
        nl = strchr(p, '\n');
        if (nl)
            *nl++ = '\0';
        ps.line++;
        int before = ps.m ? ps.m->n : 0;
        st = parse_line(&ps, p);
        for (int k = before; st == ST_OK && k < ps.m->n; k++)
            set_shape(&ps.m->nodes[k]);
    }
    (void)save;
    if (st == ST_OK && ps.m->n == 0)
        st = st_fail(ST_ERR_FORMAT, "%s: empty model: expected 'input C H W' and layers", ps.source);
    else if (st == ST_OK && ps.m->n == 1)
        st = st_fail(ST_ERR_FORMAT, "%s: the model has an input but no layers", ps.source);
out:
    free(copy);
    if (st != ST_OK) {
        free(ps.text);
        st_model_destroy(ps.m);
        return st;
    }
    ps.m->text = ps.text;
    *out = ps.m;
    return ST_OK;
}

/* A model file is text: a NUL would end the parse early without a word
 * (the layers after it silently dropped), so any control byte but
 * white space is an error naming where it sits. */
static st_status check_text(const char *text, size_t len, const char *path)
{
    int line = 1, column = 1;
    for (size_t i = 0; i < len; i++, column++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            line++;
            column = 0;
        } else if ((c < 0x20 && c != '\t' && c != '\r' && c != '\f' && c != '\v') || c == 0x7f) {
            return st_fail(ST_ERR_FORMAT, "--model %s: line %d, column %d: binary content (byte 0x%02x); a model "
                                          "file is text", path, line, column, c);
        }
    }
    return ST_OK;
}

st_status st_model_load(st_model **out, const char *name_or_path)
{
    const char *preset = st_model_preset_text(name_or_path);
    if (preset)
        return st_model_parse(out, preset, name_or_path);
    FILE *f = fopen(name_or_path, "r");
    if (!f)
        return st_fail(ST_ERR_IO, "--model %s: not a preset (%s) and not a "
                                  "readable file: %s", name_or_path, nn_preset_names(), strerror(errno));
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    char buf[4096];
    size_t n;
    while (mem && (n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, mem);
    bool bad = ferror(f);
    fclose(f);
    if (mem)
        fclose(mem);
    if (!mem || bad || !text) {
        free(text);
        return st_fail(ST_ERR_IO, "--model %s: read failed", name_or_path);
    }
    st_status st = check_text(text, len, name_or_path);
    if (st == ST_OK)
        st = st_model_parse(out, text, name_or_path);
    free(text);
    return st;
}

void st_model_destroy(st_model *m)
{
    if (!m)
        return;
    free(m->nodes);
    free(m->text);
    free(m);
}
