/* The checkpoint reader and its sections: the input is the payload (tagged
 * sections), wrapped here in a header and a right CRC so that the search
 * reaches the sections instead of stopping at the checksum.  A checkpoint
 * that reads is then checked against the model it names, as resume and
 * sampling do, and its lengths must agree with what the check let through. */
#include <string.h>

#include <zlib.h>

#include "fuzz.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const size_t total = 24 + size + 8;
    uint8_t *file = malloc(total);
    if (!file)
        return 0;
    const uint32_t version = 1, zero = 0, crc = (uint32_t)crc32(crc32(0, NULL, 0), data, (uInt)size);
    const uint64_t len = size;
    memcpy(file, "SHMTCKPT", 8);
    memcpy(file + 8, &version, 4);
    memcpy(file + 12, &zero, 4);
    memcpy(file + 16, &len, 8);
    memcpy(file + 24, data, size);
    memcpy(file + 24 + size, &crc, 4);
    memcpy(file + 28 + size, "END!", 4);
    const char *path = fuzz_file(0, file, total);
    free(file);
    st_ckpt c;
    if (!path || st_ckpt_read(path, &c) != ST_OK)
        return 0;
    fuzz_assert(c.model_text && c.params && c.buffers && c.optim_state);
    fuzz_assert(c.nalphabet <= 256 && (c.nalphabet == 0) == (c.alphabet == NULL));
    st_model *m = NULL;
    if (st_model_parse(&m, c.model_text, path) == ST_OK) {
        const st_ckpt_expect want = {.nparams = st_model_param_count(m), .nbuffers = st_model_buffer_count(m),
                                     .vocab = st_model_vocab(m)};
        if (st_ckpt_check(&c, path, &want) == ST_OK) {
            fuzz_assert(c.nparams == want.nparams && c.nbuffers == want.nbuffers);
            /* an image model's has no alphabet; a language model's has one, or none
             * when it trained on token files (--tokens-bin) */
            fuzz_assert(c.nalphabet <= (uint32_t)want.vocab && (want.vocab > 0 || c.nalphabet == 0));
        }
        st_model_destroy(m);
    }
    st_ckpt_free(&c);
    return 0;
}
