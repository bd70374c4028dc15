/* shmtrain text corpora for language models: files (or directories of
 * files, read in name order) as one stream of token ids, decoded once per
 * machine and shared read-only, and the windows a step trains on.
 *
 * Tokens are bytes: character-level (the vocabulary is the set of bytes the
 * text holds, ids in byte order; what nanoGPT's shakespeare_char does for
 * ASCII text) or byte-level (all 256).  The alphabet (id -> byte) goes into
 * checkpoints, so a checkpoint decodes its own samples.  Or they were made
 * by another tokenizer (GPT-2's BPE, ...) and come as token files: nanoGPT's
 * `.bin` (uint16 little-endian ids, what its prepare.py scripts write) or
 * llm.c's (the same after a 1024-byte header of 256 int32: 20240520, version
 * 1, the token count).  Those are mapped, not copied: the page cache holds
 * the one copy a machine's ranks read, as nanoGPT's np.memmap does.
 *
 * Every bad input is refused with one line naming the file: missing or
 * unreadable, empty, a directory without text files, a split shorter than
 * one window, a validation byte the training text lacks; a token file of odd
 * length, with a broken llm.c header, or holding an id beyond the vocabulary.
 */
#ifndef SHMTRAIN_TEXT_H
#define SHMTRAIN_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_text st_text;

typedef enum st_text_tokens {
    ST_TEXT_CHARS = 0,   /* the training text's bytes, densely numbered */
    ST_TEXT_BYTES = 1    /* every byte its own id, vocabulary 256 */
} st_text_tokens;

enum { ST_TEXT_TRAIN = 0, ST_TEXT_VAL = 1 };

/* One path: its last 10% is the validation split.  Two: training, then
 * validation.  A directory contributes its regular files in name order,
 * skipping `.dat` indexes (fortune's), symbolic links and files holding NUL
 * bytes (not text). */
st_status st_text_load(st_text **out, const char *const *paths, int npaths, st_text_tokens tokens);

/* Token files: `train` and `val` (NULL: the training file's last 10%),
 * every id below `vocab` (1..65536).  `check` scans every id; a machine's
 * other ranks map the files after its first has checked them. */
st_status st_text_load_tokens(st_text **out, const char *train, const char *val, int vocab, bool check);
void st_text_destroy(st_text *t);

size_t st_text_tokens_in(const st_text *t, int split);
const uint16_t *st_text_ids(const st_text *t, int split);
int st_text_vocab(const st_text *t);
int st_text_alphabet_len(const st_text *t);          /* 0 for token files: no alphabet */
const uint8_t *st_text_alphabet(const st_text *t);   /* id -> byte, st_text_alphabet_len entries */
bool st_text_is_mapped(const st_text *t);            /* token files: already one copy per machine */
const char *st_text_source(const st_text *t, int split);

/* Is every split long enough for windows of context + 1 tokens, and the
 * training split for `windows` distinct ones per step?  Names the file. */
st_status st_text_check(const st_text *t, int context, long windows);

/* One decoded copy per machine, as st_dataset_share/attach (data.h). */
st_status st_text_share(st_text *t, const char *name);
st_status st_text_attach(st_text **out, const char *name);

/* Training step `step`: the global batch is world x batch distinct random
 * windows drawn from one stream seeded by (seed, step); rank r takes every
 * world-th from r.  So ranks never share a window, a run repeats from its
 * seed, resumes exactly, and W ranks x b see the windows 1 rank x W b sees.
 * x: batch x context ids; y: the same shifted by one (next tokens). */
st_status st_text_train_batch(const st_text *t, uint64_t seed, uint64_t step, int world, int rank, int batch,
                              int context, int32_t *x, int *y);

/* Evaluation: consecutive windows of the validation split (at most `cap`;
 * 0: all), global batch `first` sharded as training is; `valid` gets how
 * many of this rank's are real (the rest repeat the last). */
size_t st_text_eval_windows(const st_text *t, int context, size_t cap);
void st_text_eval_batch(const st_text *t, size_t first, size_t count, int world, int rank, int batch, int context,
                        int32_t *x, int *y, int *valid);

#ifdef __cplusplus
}
#endif
#endif
