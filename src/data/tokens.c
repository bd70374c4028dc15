/* Token files: ids a tokenizer elsewhere wrote (nanoGPT's and llm.c's
 * `.bin`), mapped read-only and checked against the vocabulary. */
#define _GNU_SOURCE
#include "shmtrain/text.h"
#include "text_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files hold little-endian ids, read here in place"
#endif

enum { LLMC_MAGIC = 20240520, LLMC_VERSION = 1, LLMC_HEADER_BYTES = 1024 };

static const char *flag_of(int split) { return split ? "--val-bin" : "--tokens-bin"; }

static st_status map_file(int split, const char *path, void **map, size_t *bytes)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return st_fail(ST_ERR_IO, "%s %s: cannot open: %s", flag_of(split), path, strerror(errno));
    struct stat sb;
    st_status st = ST_OK;
    if (fstat(fd, &sb) != 0)
        st = st_fail(ST_ERR_IO, "%s %s: fstat: %s", flag_of(split), path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = st_fail(ST_ERR_FORMAT, "%s %s: not a regular file", flag_of(split), path);
    else if (sb.st_size == 0)
        st = st_fail(ST_ERR_FORMAT, "%s %s: empty", flag_of(split), path);
    if (st == ST_OK) {
        *bytes = (size_t)sb.st_size;
        *map = mmap(NULL, *bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (*map == MAP_FAILED) {
            *map = NULL;
            st = st_fail(ST_ERR_SYS, "%s %s: mmap: %s", flag_of(split), path, strerror(errno));
        }
    }
    close(fd);
    return st;
}

/* Where the ids start and how many: llm.c's header announces itself with
 * its magic; anything else is nanoGPT's bare array. */
static st_status find_ids(int split, const char *path, const uint8_t *map, size_t bytes, const uint16_t **ids,
                          size_t *n)
{
    int32_t header[3] = {0};
    if (bytes >= sizeof header)
        memcpy(header, map, sizeof header);
    if (bytes >= LLMC_HEADER_BYTES && header[0] == LLMC_MAGIC) {
        if (header[1] != LLMC_VERSION)
            return st_fail(ST_ERR_FORMAT, "%s %s: llm.c header version %d (only %d, uint16 ids, is known)",
                           flag_of(split), path, header[1], LLMC_VERSION);
        const size_t count = (uint32_t)header[2];
        if (bytes != LLMC_HEADER_BYTES + 2 * count)
            return st_fail(ST_ERR_FORMAT, "%s %s: its llm.c header says %zu tokens (%zu bytes) but the file has %zu "
                                          "bytes", flag_of(split), path, count, LLMC_HEADER_BYTES + 2 * count, bytes);
        *ids = (const uint16_t *)(map + LLMC_HEADER_BYTES);
        *n = count;
    } else {
        if (bytes % 2)
            return st_fail(ST_ERR_FORMAT, "%s %s: %zu bytes is odd: not uint16 token ids (nanoGPT's .bin)",
                           flag_of(split), path, bytes);
        *ids = (const uint16_t *)map;
        *n = bytes / 2;
    }
    if (*n == 0)
        return st_fail(ST_ERR_FORMAT, "%s %s: holds no tokens", flag_of(split), path);
    return ST_OK;
}

/* Every id below the vocabulary: the embedding would read past its table. */
static st_status check_ids(int split, const char *path, const uint16_t *ids, size_t n, size_t offset, int vocab)
{
    uint16_t top = 0;
    for (size_t i = 0; i < n; i++)
        top = ids[i] > top ? ids[i] : top;
    if (top < vocab)
        return ST_OK;
    size_t at = 0;
    while (ids[at] < vocab)
        at++;
    return st_fail(ST_ERR_FORMAT, "%s %s: token %zu is id %u, beyond the vocabulary of %d (--vocab)", flag_of(split),
                   path, offset + at, ids[at], vocab);
}

st_status st_text_load_tokens(st_text **out, const char *train, const char *val, int vocab, bool check)
{
    *out = NULL;
    if (vocab < 1 || vocab > 65536)
        return st_fail(ST_ERR_INVALID, "--vocab %d: token files hold uint16 ids, so 1 to 65536", vocab);
    st_text *t = calloc(1, sizeof *t);
    if (!t)
        return st_fail(ST_ERR_NOMEM, "--tokens-bin %s: out of memory", train);
    const char *paths[2] = {train, val ? val : train};
    t->flag[0] = flag_of(0);
    t->flag[1] = flag_of(val ? 1 : 0);
    st_status st = ST_OK;
    for (int s = 0; s < (val ? 2 : 1) && st == ST_OK; s++) {
        snprintf(t->source[s], sizeof t->source[s], "%s", paths[s]);
        if ((st = map_file(s, paths[s], &t->file_map[s], &t->file_bytes[s])) == ST_OK)
            st = find_ids(s, paths[s], t->file_map[s], t->file_bytes[s], &t->ids[s], &t->n[s]);
        if (st == ST_OK && check)
            st = check_ids(s, paths[s], t->ids[s], t->n[s], 0, vocab);
    }
    if (st == ST_OK && !val) {  /* the last 10% validates, as for --text */
        snprintf(t->source[1], sizeof t->source[1], "%s", train);
        const size_t cut = t->n[0] - t->n[0] / 10;
        t->ids[1] = t->ids[0] + cut;
        t->n[1] = t->n[0] - cut;
        t->n[0] = cut;
    }
    if (st != ST_OK) {
        st_text_destroy(t);
        return st;
    }
    t->vocab = vocab;
    *out = t;
    return ST_OK;
}
