/* What a parsed model says about itself: the accessors, shapes, the
 * parameter roles and the summary printout. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "model.h"

const char *st_model_text(const st_model *m) { return m->text; }
const char *st_model_recipe(const st_model *m) { return m->recipe; }
size_t st_model_param_count(const st_model *m) { return m->params; }
size_t st_model_buffer_count(const st_model *m) { return m->buffers; }

size_t st_model_input_size(const st_model *m) { return st_shape_elems(&m->nodes[0].shape); }

void st_model_input(const st_model *m, st_shape *shape, st_dtype *dtype)
{
    *shape = m->nodes[0].shape;
    *dtype = m->nodes[0].dtype;
}

void st_model_input_shape(const st_model *m, int *c, int *h, int *w)
{
    *c = m->nodes[0].c;
    *h = m->nodes[0].h;
    *w = m->nodes[0].w;
}

/* Per position: a sequence's last layer scores every position. */
int st_model_classes(const st_model *m)
{
    const struct node *nd = &m->nodes[m->n - 1];
    return nd->t > 0 ? nd->c : (int)st_shape_elems(&nd->shape);
}

int st_model_positions(const st_model *m) { return node_positions(&m->nodes[m->n - 1]); }

int st_model_vocab(const st_model *m) { return m->nodes[0].tokens ? m->nodes[1].vocab : 0; }

void st_model_decay_mask(const st_model *m, uint8_t *mask)
{
    memset(mask, 0, m->params);
    for (int i = 0; i < m->n; i++) {
        const struct node *nd = &m->nodes[i];
        const bool matrix = nd->kind == NODE_CONV || nd->kind == NODE_LINEAR || nd->kind == NODE_EMBED;
        if (matrix)  /* the embed's "bias" is its position table, a matrix too */
            memset(mask + nd->w_off, 1, nd->w_count + (nd->kind == NODE_EMBED ? nd->b_count : 0));
    }
}

/* ------------------------------------------------------ shapes, types -- */

size_t model_largest_activation(const st_model *m)
{
    size_t largest = 1;
    for (int i = 0; i < m->n; i++) {
        const struct node *nd = &m->nodes[i];
        const size_t scores = nd->kind == NODE_ATTENTION ? (size_t)nd->heads * (size_t)nd->t * (size_t)nd->t : 0;
        const size_t elems = scores > st_shape_elems(&nd->shape) ? scores : st_shape_elems(&nd->shape);
        largest = elems > largest ? elems : largest;
    }
    return largest;
}

size_t st_shape_elems(const st_shape *s)
{
    size_t n = 1;
    for (int i = 0; i < s->ndims; i++)
        n *= (size_t)s->dims[i];
    return n;
}

void st_shape_str(const st_shape *s, char *buf, size_t len)
{
    size_t at = 0;
    if (len)
        buf[0] = '\0';
    for (int i = 0; i < s->ndims && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%d", i ? "x" : "", s->dims[i]);
}

bool st_shape_equal(const st_shape *a, const st_shape *b)
{
    if (a->ndims != b->ndims)
        return false;
    for (int i = 0; i < a->ndims; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

/* --------------------------------------------------------- summary -- */

/* Each layer kind's line in the summary (the layer table's last column):
 * what the canonical text says, and what the parser added (a shortcut, a
 * tie, where an add's second input comes from). */
typedef void summary_fn(const st_model *m, int i, char *desc, size_t len);

void summary_keyword(const st_model *m, int i, char *desc, size_t len)
{
    snprintf(desc, len, "%s", node_kind_name(m->nodes[i].kind));
}

void summary_input(const st_model *m, int i, char *desc, size_t len)
{
    snprintf(desc, len, "input%s", m->nodes[i].tokens ? " tokens" : "");
}

void summary_conv(const st_model *m, int i, char *desc, size_t len)
{
    const struct node *nd = &m->nodes[i];
    snprintf(desc, len, "conv %d k%d s%d p%d%s%s", nd->out, nd->k, nd->s, nd->p, nd->bias ? "" : " nobias",
             nd->in != i - 1 ? " (shortcut)" : "");
}

void summary_linear(const st_model *m, int i, char *desc, size_t len)
{
    snprintf(desc, len, "linear %d", m->nodes[i].out);
}

void summary_pool(const st_model *m, int i, char *desc, size_t len)
{
    const struct node *nd = &m->nodes[i];
    if (nd->global)
        snprintf(desc, len, "%s global", node_kind_name(nd->kind));
    else
        snprintf(desc, len, "%s k%d s%d", node_kind_name(nd->kind), nd->k, nd->s);
}

void summary_dropout(const st_model *m, int i, char *desc, size_t len)
{
    snprintf(desc, len, "dropout %g", (double)m->nodes[i].drop);
}

void summary_add(const st_model *m, int i, char *desc, size_t len)
{
    snprintf(desc, len, "add (from #%d)", m->nodes[i].in2);
}

void summary_embed(const st_model *m, int i, char *desc, size_t len)
{
    const struct node *nd = &m->nodes[i];
    snprintf(desc, len, "embed %d %d%s", nd->vocab, nd->c, nd->tied ? " (tied)" : "");
}

void summary_attention(const st_model *m, int i, char *desc, size_t len)
{
    snprintf(desc, len, "attention heads %d", m->nodes[i].heads);
}

void summary_head(const st_model *m, int i, char *desc, size_t len)
{
    snprintf(desc, len, "head tied (to #%d)", m->nodes[i].embed);
}

static summary_fn *const summaries[] = {
#define SUMMARY(KIND, keyword, parse, init, scratch, fwd, bwd, build, bf16, summary, ...) [NODE_##KIND] = summary,
    NN_LAYER_TABLE(SUMMARY)
#undef SUMMARY
};
_Static_assert(sizeof summaries / sizeof *summaries == NODE_KINDS, "a summary line per layer kind");

void st_model_summary(const st_model *m, FILE *f)
{
    fprintf(f, "%-4s %-26s %-16s %12s\n", "#", "layer", "output", "parameters");
    for (int i = 0; i < m->n; i++) {
        const struct node *nd = &m->nodes[i];
        char desc[64], shape[32];
        summaries[nd->kind](m, i, desc, sizeof desc);
        st_shape_str(&nd->shape, shape, sizeof shape);
        fprintf(f, "%-4d %-26s %-16s %12zu\n", i, desc, shape, nd->w_count + nd->b_count);
    }
    fprintf(f, "total parameters: %zu (%.1f KiB)\n", m->params, (double)m->params * 4 / 1024);
}
