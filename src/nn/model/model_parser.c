/* The parser's helpers, for the model text's grammar (model_parser.h):
 * errors and the canonical text, new nodes, numbers and parameter spans. */
#define _GNU_SOURCE
#include "model_parser.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
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

st_status parser_error(const struct parser *ps, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return st_fail(ST_ERR_FORMAT, "%s:%d: %s", ps->source, ps->line, msg);
}

st_status parser_emit(struct parser *ps, const char *fmt, ...)
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

struct node *parser_node(struct parser *ps, node_kind kind)
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

const struct node *parser_last(const struct parser *ps) { return &ps->m->nodes[ps->m->n - 1]; }

struct node *parser_seq_node(struct parser *ps, node_kind kind, int t, int c)
{
    struct node *nd = parser_node(ps, kind);
    if (nd) {
        nd->t = t;
        nd->c = c;
        nd->h = nd->w = 1;
        nd->flat = true;
    }
    return nd;
}

bool parser_int(const char *tok, char prefix, int *out)
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

st_status parser_elements(const struct parser *ps, const char *what, size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab, abc;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc) || abc > MODEL_MAX_TENSOR)
        return parser_error(ps, "%s: %zu x %zu x %zu elements is more than one tensor may hold (%zu)", what, a, b, c,
                            MODEL_MAX_TENSOR);
    *out = abc;
    return ST_OK;
}

st_status parser_params(struct parser *ps, struct node *nd, size_t weights, size_t bias)
{
    if (weights > MODEL_MAX_TENSOR || bias > MODEL_MAX_TENSOR)
        return parser_error(ps, "%s: %zu weights is more than one tensor may hold (%zu)", node_kind_name(nd->kind),
                            weights > bias ? weights : bias, MODEL_MAX_TENSOR);
    if (weights + bias > MODEL_MAX_PARAMS - ps->m->params)
        return parser_error(ps, "%s: the model would have %zu + %zu parameters, more than %zu", node_kind_name(nd->kind),
                            ps->m->params, weights + bias, MODEL_MAX_PARAMS);
    nd->w_off = ps->m->params;
    nd->w_count = weights;
    nd->b_off = nd->w_off + weights;
    nd->b_count = bias;
    ps->m->params += weights + bias;
    return ST_OK;
}

int parser_find_name(const struct parser *ps, const char *name)
{
    for (int i = 0; i < ps->nnames; i++)
        if (!strcmp(ps->names[i], name))
            return i;
    return -1;
}
