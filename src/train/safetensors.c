/* The safetensors format, out (shmtrain export) and back in (--init-from).
 *
 * A checkpoint's model out in the safetensors format (the layout Hugging
 * Face's safetensors library reads): an 8-byte little-endian header length,
 * a JSON header of name -> dtype, shape and data offsets (with string
 * metadata under "__metadata__"), padded with spaces to a multiple of 8,
 * then the tensors' little-endian bytes, contiguous, in the header's order.
 * Names and layouts are PyTorch's (st_model_tensors).  Written to a
 * temporary file and renamed: a failed export leaves no partial file. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmtrain/ckpt.h"
#include "shmtrain/json.h"
#include "shmtrain/paths.h"
#include "shmtrain/nn.h"
#include "shmtrain/train.h"
#include "safetensors_header.h"

/* The header's JSON, padded with spaces to a multiple of 8 (*len). */
static char *header_of(const st_ckpt *c, const st_tensor_ref *t, int n, size_t *len)
{
    char *text = NULL, step[32], *alphabet = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return NULL;
    if (c->nalphabet && (alphabet = malloc(2 * (size_t)c->nalphabet + 1)))
        for (uint32_t i = 0; i < c->nalphabet; i++)  /* bytes, as hex: any byte stays valid JSON */
            sprintf(alphabet + 2 * i, "%02x", c->alphabet[i]);
    snprintf(step, sizeof step, "%llu", (unsigned long long)c->step);
    st_json j;
    st_json_init(&j, f);
    st_json_object_begin(&j, NULL);
    st_json_object_begin(&j, "__metadata__");
    st_json_string(&j, "format", "pt");
    st_json_string(&j, "producer", "shmtrain");
    st_json_string(&j, "model", c->model_text);
    st_json_string(&j, "step", step);
    if (alphabet)
        st_json_string(&j, "alphabet_hex", alphabet);  /* token id i is byte alphabet[i] */
    st_json_object_end(&j);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        st_json_object_begin(&j, t[i].name);
        st_json_string(&j, "dtype", "F32");
        st_json_array_begin(&j, "shape");
        for (int d = 0; d < t[i].ndims; d++)
            st_json_int(&j, NULL, (long long)t[i].dims[d]);
        st_json_array_end(&j);
        st_json_array_begin(&j, "data_offsets");
        st_json_uint(&j, NULL, at);
        st_json_uint(&j, NULL, at + t[i].count * sizeof(float));
        st_json_array_end(&j);
        st_json_object_end(&j);
        at += t[i].count * sizeof(float);
    }
    st_json_object_end(&j);
    while (ftell(f) % 8)
        fputc(' ', f);
    free(alphabet);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *len = size;
    return text;
}

/* The file's bytes: length, header, tensors (x86 is little-endian, as the
 * format is). */
static st_status write_to(FILE *f, const char *path, const st_ckpt *c, const st_tensor_ref *t, int n,
                          const char *header, size_t len)
{
    const uint64_t n64 = len;
    bool ok = fwrite(&n64, sizeof n64, 1, f) == 1 && fwrite(header, 1, len, f) == len;
    for (int i = 0; i < n && ok; i++) {
        const float *from = (t[i].buffer ? c->buffers : c->params) + t[i].offset;
        ok = fwrite(from, sizeof(float), t[i].count, f) == t[i].count;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    return ok ? ST_OK : st_fail(ST_ERR_IO, "--out %s: write failed: %s", path, strerror(errno));
}

static st_status export_tensors(const st_ckpt *c, const st_tensor_ref *t, int n, const char *path)
{
    size_t len;
    char *header = header_of(c, t, n, &len), tmp[4096];
    if (!header)
        return st_fail(ST_ERR_NOMEM, "export: out of memory");
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    st_status st = f ? write_to(f, path, c, t, n, header, len)
                     : st_fail(ST_ERR_IO, "--out %s: cannot create %s: %s", path, tmp, strerror(errno));
    if (f && fclose(f) != 0 && st == ST_OK)
        st = st_fail(ST_ERR_IO, "--out %s: %s", path, strerror(errno));
    if (st == ST_OK && rename(tmp, path) != 0)
        st = st_fail(ST_ERR_IO, "--out %s: rename failed: %s", path, strerror(errno));
    if (st != ST_OK)
        unlink(tmp);
    free(header);
    return st;
}

st_status st_export_safetensors(const char *checkpoint, const char *path)
{
    if (st_same_file(checkpoint, path))
        return st_fail(ST_ERR_INVALID, "--out %s is the checkpoint it exports (%s, the same file): it would be "
                                       "replaced; give another name", path, checkpoint);
    st_ckpt c;
    st_model *m = NULL;
    st_tensor_ref *t = NULL;
    int n = 0;
    st_status st = st_ckpt_read(checkpoint, &c);
    if (st != ST_OK)
        return st;
    if ((st = st_model_parse(&m, c.model_text, checkpoint)) != ST_OK)
        goto out;
    const st_ckpt_expect want = {.nparams = st_model_param_count(m), .nbuffers = st_model_buffer_count(m),
                                 .vocab = st_model_vocab(m)};
    if ((st = st_ckpt_check(&c, checkpoint, &want)) != ST_OK || (st = st_model_tensors(m, &t, &n)) != ST_OK)
        goto out;
    st = export_tensors(&c, t, n, path);
out:
    free(t);
    st_model_destroy(m);
    st_ckpt_free(&c);
    return st;
}

/* ------------------------------------------------------------- import -- */

/* "2x3" of n dimensions (of either kind) into out. */
static void dims_text(char *out, size_t len, const void *dims, int n, bool wide)
{
    out[0] = '\0';
    for (int d = 0; d < n; d++) {
        const long long v = wide ? (long long)((const uint64_t *)dims)[d] : (long long)((const int64_t *)dims)[d];
        snprintf(out + strlen(out), len - strlen(out), "%s%lld", d ? "x" : "", v);
    }
}

/* Tensor t of the model from the file: its dtype and shape checked (its
 * bytes were, by sft_parse's rules). */
static st_status import_one(const char *path, const struct sft_header *h, const st_tensor_ref *t, float *to)
{
    const struct sft_tensor *e = sft_find(h, t->name);
    if (!e)
        return st_fail(ST_ERR_MISMATCH, "--init-from %s: no tensor '%s' (the model's)", path, t->name);
    if (strcmp(e->dtype, "F32"))
        return st_fail(ST_ERR_MISMATCH, "--init-from %s: %s is %s, and this model's parameters are F32", path,
                       t->name, e->dtype);
    bool same = e->ndims == t->ndims;
    for (int d = 0; same && d < e->ndims; d++)
        same = e->shape[d] == (uint64_t)t->dims[d];
    if (!same) {
        char want[96], have[96];
        dims_text(want, sizeof want, t->dims, t->ndims, false);
        dims_text(have, sizeof have, e->shape, e->ndims, true);
        return st_fail(ST_ERR_MISMATCH, "--init-from %s: %s is %s, the model's is %s", path, t->name, have, want);
    }
    memcpy(to, h->data + e->begin, t->count * sizeof(float));
    return ST_OK;
}

/* Every tensor the file holds is one the model has: a name it does not
 * know is a mismatch, not something to drop silently. */
static st_status check_names(const char *path, const struct sft_header *h, const st_tensor_ref *t, int n)
{
    for (int k = 0; k < h->count; k++) {
        bool known = false;
        for (int i = 0; i < n && !known; i++)
            known = !strcmp(t[i].name, h->tensors[k].name);
        if (!known)
            return st_fail(ST_ERR_MISMATCH, "--init-from %s: tensor '%s' is not one of this model's", path,
                           h->tensors[k].name);
    }
    return ST_OK;
}

static st_status import_all(const char *path, const unsigned char *blob, size_t size, const st_tensor_ref *t, int n,
                            float *params, float *buffers, float *tied)
{
    struct sft_header h;
    st_status st = sft_parse(blob, size, "--init-from", path, &h);
    if (st != ST_OK)
        return st;
    st = check_names(path, &h, t, n);
    for (int i = 0; i < n && st == ST_OK; i++) {
        const bool head = !strcmp(t[i].name, "lm_head.weight");
        float *to = head ? tied : (t[i].buffer ? buffers : params) + t[i].offset;
        st = import_one(path, &h, &t[i], to);
        if (st == ST_OK && head && memcmp(tied, params + t[i].offset, t[i].count * sizeof(float)))
            st = st_fail(ST_ERR_MISMATCH, "--init-from %s: lm_head.weight differs from transformer.wte.weight, and "
                                          "this model's head is tied to its token table", path);
    }
    sft_free(&h);
    return st;
}

st_status st_import_safetensors(const char *path, const st_model *m, float *params, float *buffers)
{
    st_tensor_ref *t = NULL;
    int n = 0;
    unsigned char *blob = NULL;
    float *tied = NULL;
    size_t size = 0;
    st_status st = st_model_tensors(m, &t, &n);
    if (st != ST_OK)
        return st;
    FILE *f = fopen(path, "rb");
    if (!f) {
        st = st_fail(ST_ERR_IO, "--init-from %s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > 0) {
        size = (size_t)ftell(f);
        rewind(f);
        blob = malloc(size);
    }
    size_t largest = 0;
    for (int i = 0; i < n; i++)
        largest = t[i].count > largest ? t[i].count : largest;
    tied = malloc(largest * sizeof *tied + 1);
    if (!blob || !tied || fread(blob, 1, size, f) != size)
        st = blob && tied ? st_fail(ST_ERR_IO, "--init-from %s: cannot read it", path)
                          : st_fail(ST_ERR_FORMAT, "--init-from %s: empty, or out of memory", path);
    else
        st = import_all(path, blob, size, t, n, params, buffers, tied);
    fclose(f);
out:
    free(tied);
    free(blob);
    free(t);
    return st;
}
