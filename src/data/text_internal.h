/* Internal: the text corpus's representation, shared by its two readers
 * (text.c: files of characters; tokens.c: files of token ids). */
#ifndef SHMTRAIN_DATA_TEXT_INTERNAL_H
#define SHMTRAIN_DATA_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The ids live in exactly one of: `own` (malloc'd, both splits), the shared
 * segment `map`, or the token files themselves mapped read-only
 * (`file_map`, whose pages the machine's ranks share through the page
 * cache).  The struct owns whichever it is. */
struct st_text {
    const uint16_t *ids[2];   /* training, validation */
    size_t n[2];
    int vocab;
    int alphabet_len;         /* 0: ids from a tokenizer shmtrain does not know */
    uint8_t alphabet[256];
    char source[2][256];
    const char *flag[2];      /* the flag that named each source, for messages */
    uint16_t *own;
    void *map;
    size_t map_bytes;
    void *file_map[2];
    size_t file_bytes[2];
};

#endif
