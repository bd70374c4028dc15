/* PNG and JPEG through the decoders, the colour conversion, the resize and
 * the centre crop (image_decode), as an image folder's reader runs them:
 * the first two bytes choose the target (1 or 3 channels, a crop of 1-32
 * pixels a side, a shorter side of up to 64 before it), the rest is the
 * file.  Any byte of the target may be written, none past it. */
#include <string.h>

#include "fuzz.h"
#include "image_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    struct image_target t = {.channels = data[0] & 1 ? 3 : 1, .height = 1 + (data[0] >> 1) % 32,
                             .width = 1 + data[1] % 32};
    const int larger = t.height > t.width ? t.height : t.width;
    t.resize = larger + (data[1] >> 5) * 4;
    const char *path = fuzz_file(0, data + 2, size - 2);
    const size_t bytes = (size_t)t.channels * t.height * t.width;
    uint8_t *out = path ? malloc(bytes + 64) : NULL;
    if (!out)
        return 0;
    memset(out + bytes, 0xa5, 64);  /* a guard: nothing is written past the target */
    char err[256];
    if (image_decode(path, &t, out, err, sizeof err) != 0)
        fuzz_assert(err[0] != '\0');  /* a refusal says why */
    for (int i = 0; i < 64; i++)
        fuzz_assert(out[bytes + i] == 0xa5);
    free(out);
    return 0;
}
