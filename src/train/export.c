/* A checkpoint's model out in the safetensors format (the layout Hugging
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
#include "shmtrain/nn.h"
#include "shmtrain/train.h"

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
