/* What every fuzz harness shares.  A harness is one function,
 * LLVMFuzzerTestOneInput, built two ways: with clang's libFuzzer
 * (tests/fuzz/CMakeLists.txt, `make fuzz`) to search for inputs, and with
 * replay.c into the normal suite (and the ASan build), which runs it over
 * the seed corpus and every input that ever crashed it (regressions/).
 *
 * A harness returns 0 for every input; a memory error, undefined behaviour
 * or a broken invariant (fuzz_assert) ends the process, which is the
 * finding. */
#ifndef SHMTRAIN_FUZZ_H
#define SHMTRAIN_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the parser under test: abort with where it broke. */
#define fuzz_assert(cond)                                                                                  \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);                  \
            abort();                                                                                       \
        }                                                                                                  \
    } while (0)

/* `size` bytes into the harness's file number `slot` (a private temporary
 * directory, made once per process); its path, valid until the next call
 * with the same slot.  NULL if the file cannot be written (then the input is
 * skipped, not a finding). */
const char *fuzz_file(int slot, const void *data, size_t size);

/* The input as a NUL-terminated string (malloc'd; NULL when out of memory,
 * then the input is skipped). */
char *fuzz_text(const uint8_t *data, size_t size);

#endif
