/* A model's parameters as named tensors, the way PyTorch names them: a
 * language model of GPT blocks in nanoGPT's GPT keys (docs/training.md,
 * "Model out"), any other in nn.Sequential's ("<index>.weight", the index
 * counting layers after the input, as bench/torch_models.py builds the
 * image presets).  In flat-buffer order: each tensor's place in the
 * parameters (or the batch-norm statistics) and its shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

struct tensors {
    st_tensor_ref *v;
    int n, cap;
};

static st_status add(struct tensors *t, const char *name, bool buffer, size_t offset, int ndims, const int64_t *dims)
{
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 32;
        st_tensor_ref *grown = realloc(t->v, (size_t)cap * sizeof *grown);
        if (!grown)
            return st_fail(ST_ERR_NOMEM, "model: out of memory");
        t->v = grown;
        t->cap = cap;
    }
    st_tensor_ref *r = &t->v[t->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%.*s", (int)sizeof r->name - 1, name);
    r->buffer = buffer;
    r->offset = offset;
    r->ndims = ndims;
    r->count = 1;
    for (int d = 0; d < ndims; d++) {
        r->dims[d] = dims[d];
        r->count *= (size_t)dims[d];
    }
    return ST_OK;
}

/* nanoGPT's name of node k of a GPT (its blocks expanded in the canonical
 * text): within a block, the first layer norm is ln_1 and the second ln_2,
 * the linear layers c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj in order; a
 * layer norm with no linear layer after it is ln_f. */
static const char *gpt_name(const st_model *m, int k, int *block, int *ln, int *linear, char *buf, size_t len)
{
    static const char *const linears[] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    const struct node *nd = &m->nodes[k];
    if (nd->kind == NODE_LAYERNORM) {
        bool last = true;
        for (int j = k + 1; j < m->n && last; j++)
            last = m->nodes[j].kind != NODE_LINEAR;
        if (last)
            return "transformer.ln_f";
        if (*ln == 0 || *ln == 2) {  /* a new block */
            ++*block;
            *ln = 0;
            *linear = 0;
        }
        snprintf(buf, len, "transformer.h.%d.ln_%d", *block, ++*ln);
        return buf;
    }
    if (nd->kind == NODE_LINEAR && *block >= 0 && *linear < 4) {
        snprintf(buf, len, "transformer.h.%d.%s", *block, linears[(*linear)++]);
        return buf;
    }
    return NULL;
}

static bool is_gpt(const st_model *m)
{
    return m->n > 2 && m->nodes[0].tokens && m->nodes[1].kind == NODE_EMBED && m->nodes[m->n - 1].kind == NODE_HEAD;
}

/* A convolution's or linear layer's "<prefix>.weight" of these dims and its
 * bias, if it has one. */
static st_status weight_and_bias(struct tensors *t, const struct node *nd, const char *prefix, int ndims,
                                 const int64_t *dims)
{
    char name[112];  /* a prefix of at most 95 and a suffix */
    snprintf(name, sizeof name, "%s.weight", prefix);
    st_status st = add(t, name, false, nd->w_off, ndims, dims);
    if (st == ST_OK && nd->b_count) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        st = add(t, name, false, nd->b_off, 1, dims);
    }
    return st;
}

static st_status node_tensors(struct tensors *t, const st_model *m, int k, const char *prefix)
{
    const struct node *nd = &m->nodes[k];
    char name[112];  /* a prefix of at most 95 and a suffix */
    const int64_t out = nd->out > 0 ? nd->out : nd->c;
    switch (nd->kind) {
    case NODE_CONV: {
        const int64_t dims[] = {out, (int64_t)nd->w_count / (out * nd->k * nd->k), nd->k, nd->k};
        return weight_and_bias(t, nd, prefix, 4, dims);
    }
    case NODE_LINEAR: {
        const int64_t dims[] = {out, (int64_t)nd->w_count / out};
        return weight_and_bias(t, nd, prefix, 2, dims);
    }
    case NODE_BATCHNORM:
    case NODE_LAYERNORM: {
        const int64_t c = (int64_t)nd->w_count;
        snprintf(name, sizeof name, "%s.weight", prefix);
        st_status st = add(t, name, false, nd->w_off, 1, &c);
        snprintf(name, sizeof name, "%s.bias", prefix);
        if (st == ST_OK)
            st = add(t, name, false, nd->b_off, 1, &c);
        if (st == ST_OK && nd->kind == NODE_BATCHNORM) {
            snprintf(name, sizeof name, "%s.running_mean", prefix);
            st = add(t, name, true, nd->buf_off, 1, &c);
            snprintf(name, sizeof name, "%s.running_var", prefix);
            if (st == ST_OK)
                st = add(t, name, true, nd->buf_off + (size_t)c, 1, &c);
        }
        return st;
    }
    default: return ST_OK;
    }
}

static st_status gpt_tensors(struct tensors *t, const st_model *m)
{
    const struct node *e = &m->nodes[1];
    const int64_t c = e->c, table[] = {(int64_t)e->w_count / c, c}, positions[] = {(int64_t)e->b_count / c, c};
    st_status st = add(t, "transformer.wte.weight", false, e->w_off, 2, table);
    if (st == ST_OK)
        st = add(t, "transformer.wpe.weight", false, e->b_off, 2, positions);
    int block = -1, ln = 0, linear = 0;
    char buf[96];
    for (int k = 2; k < m->n && st == ST_OK; k++) {
        const char *name = gpt_name(m, k, &block, &ln, &linear, buf, sizeof buf);
        if (name)
            st = node_tensors(t, m, k, name);
        else if (m->nodes[k].w_count)
            st = st_fail(ST_ERR_FORMAT, "model: line %d has parameters nanoGPT's GPT has no name for",
                         m->nodes[k].line);
    }
    /* nanoGPT's state_dict holds the tied head as its own key */
    if (st == ST_OK)
        st = add(t, "lm_head.weight", false, e->w_off, 2, table);
    return st;
}

st_status st_model_tensors(const st_model *m, st_tensor_ref **out, int *count)
{
    struct tensors t = {0};
    st_status st = ST_OK;
    if (is_gpt(m)) {
        st = gpt_tensors(&t, m);
    } else {
        char prefix[16];
        for (int k = 1; k < m->n && st == ST_OK; k++) {
            snprintf(prefix, sizeof prefix, "%d", k - 1);
            st = node_tensors(&t, m, k, prefix);
        }
    }
    if (st != ST_OK) {
        free(t.v);
        return st;
    }
    *out = t.v;
    *count = t.n;
    return ST_OK;
}
