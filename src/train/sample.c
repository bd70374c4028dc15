/* Sampling from a language model's checkpoint: the prompt's continuation,
 * one token at a time, deterministic from the seed (nanoGPT's sample.py). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/ckpt.h"
#include "shmtrain/nn.h"
#include "shmtrain/train.h"

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Among the first `vocab` logits (the ids the alphabet names): greedy at
 * temperature 0, else softmax(z / T) over the top k, drawn with the seed. */
static int pick(const float *z, int vocab, const st_sample_options *o, uint64_t *rng, double *w)
{
    int best = 0;
    for (int i = 1; i < vocab; i++)
        best = z[i] > z[best] ? i : best;
    if (o->temperature <= 0)
        return best;
    double kth = -INFINITY;
    if (o->top_k > 0 && o->top_k < vocab) {  /* the k-th largest: k passes of a selection, vocab is small */
        double below = INFINITY;
        for (int k = 0; k < o->top_k; k++) {
            double m = -INFINITY;
            for (int i = 0; i < vocab; i++)
                if (z[i] < below && z[i] > m)
                    m = z[i];
            below = kth = m;
        }
    }
    double sum = 0;
    for (int i = 0; i < vocab; i++)
        sum += (w[i] = z[i] >= kth ? exp((z[i] - z[best]) / o->temperature) : 0.0);
    double u = (double)(next(rng) >> 11) / (double)(1ull << 53) * sum;
    for (int i = 0; i < vocab; i++)
        if ((u -= w[i]) < 0)
            return i;
    return best;
}

static st_status encode(const st_ckpt *c, const char *prompt, int32_t *ids, size_t *len)
{
    int id_of[256];
    for (int b = 0; b < 256; b++)
        id_of[b] = -1;
    for (uint32_t i = 0; i < c->nalphabet; i++)
        id_of[c->alphabet[i]] = (int)i;
    *len = strlen(prompt);
    for (size_t i = 0; i < *len; i++) {
        const unsigned char b = (unsigned char)prompt[i];
        if (id_of[b] < 0)
            return st_fail(ST_ERR_INVALID, "--prompt: byte 0x%02x ('%c') at offset %zu is not in the checkpoint's "
                                           "vocabulary of %u", b, b >= 32 && b < 127 ? b : '?', i, c->nalphabet);
        ids[i] = id_of[b];
    }
    return ST_OK;
}

/* A model that reads tokens, with the letters it was trained on, and a
 * checkpoint of its shape. */
static st_status check_sampleable(const st_ckpt *c, const st_model *m, const char *path)
{
    if (!st_model_vocab(m))
        return st_fail(ST_ERR_MISMATCH, "--checkpoint %s: its model reads images, not tokens: nothing to sample",
                       path);
    if (!c->nalphabet)
        return st_fail(ST_ERR_MISMATCH, "--checkpoint %s: trained on token files (--tokens-bin) from a tokenizer "
                                        "shmtrain does not have: export it (shmtrain export) and sample with that "
                                        "tokenizer's tools", path);
    const st_ckpt_expect want = {.nparams = st_model_param_count(m), .nbuffers = st_model_buffer_count(m),
                                 .vocab = st_model_vocab(m)};
    return st_ckpt_check(c, path, &want);
}

/* A net of one sequence holding the checkpoint's weights, in evaluation
 * mode; the caller destroys it. */
static st_status net_of(st_net **net, const st_model *m, const st_ckpt *c)
{
    const st_net_config nc = {.batch = 1};
    st_status st = st_net_create(net, m, &nc);
    if (st != ST_OK)
        return st;
    size_t nparams, nbuffers;  /* the lengths st_ckpt_check compared the file's with */
    float *params = st_net_params(*net, &nparams), *buffers = st_net_buffers(*net, &nbuffers);
    memcpy(params, c->params, nparams * sizeof(float));
    if (nbuffers)
        memcpy(buffers, c->buffers, nbuffers * sizeof(float));
    st_net_set_training(*net, false);
    return ST_OK;
}

st_status st_sample(const st_sample_options *o, FILE *out)
{
    st_ckpt c;
    st_model *m = NULL;
    st_net *net = NULL;
    int32_t *seq = NULL, *window = NULL;
    float *logits = NULL;
    double *w = NULL;
    st_status st = st_ckpt_read(o->checkpoint, &c);
    if (st != ST_OK)
        return st;
    if ((st = st_model_parse(&m, c.model_text, o->checkpoint)) != ST_OK)
        goto out;
    if ((st = check_sampleable(&c, m, o->checkpoint)) != ST_OK)
        goto out;
    const int context = st_model_positions(m), vocab = st_model_classes(m);
    const size_t plen = strlen(o->prompt), total = plen + (size_t)o->tokens;
    seq = malloc(total * sizeof *seq + 1);
    window = calloc((size_t)context, sizeof *window);
    logits = malloc((size_t)context * vocab * sizeof *logits);
    w = malloc((size_t)vocab * sizeof *w);
    if (!seq || !window || !logits || !w) {
        st = st_fail(ST_ERR_NOMEM, "sample: out of memory");
        goto out;
    }
    size_t len;
    if (!plen) {
        st = st_fail(ST_ERR_INVALID, "--prompt: empty (give at least one character)");
        goto out;
    }
    if ((st = encode(&c, o->prompt, seq, &len)) != ST_OK || (st = net_of(&net, m, &c)) != ST_OK)
        goto out;
    uint64_t rng = o->seed * 0x2545f4914f6cdd1dull + 7;
    fputs(o->prompt, out);
    for (int k = 0; k < o->tokens; k++) {
        /* The last `context` tokens from position 0; the causal mask makes
         * the padding after them irrelevant to the last real position. */
        const size_t from = len > (size_t)context ? len - (size_t)context : 0, n = len - from;
        memcpy(window, seq + from, n * sizeof *window);
        if ((st = st_net_forward(net, window)) != ST_OK)
            goto out;
        st_net_output(net, logits);
        const int id = pick(logits + (n - 1) * (size_t)vocab, (int)c.nalphabet, o, &rng, w);
        seq[len++] = id;
        fputc(c.alphabet[id], out);
    }
    fputc('\n', out);
    fflush(out);
out:
    st_net_destroy(net);
    st_model_destroy(m);
    st_ckpt_free(&c);
    free(seq);
    free(window);
    free(logits);
    free(w);
    return st;
}
