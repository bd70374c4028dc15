/* fuzz_file (fuzz.h): inputs as files, for readers that take paths. */
#define _GNU_SOURCE
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/st-fuzz-XXXXXX";
static int made;

static void remove_dir(void)
{
    char path[64];
    for (int slot = 0; slot < 4; slot++) {
        snprintf(path, sizeof path, "%s/%d", dir, slot);
        unlink(path);
    }
    rmdir(dir);
}

const char *fuzz_file(int slot, const void *data, size_t size)
{
    static char path[4][64];
    if (slot < 0 || slot >= 4)
        return NULL;
    if (!made) {
        if (!mkdtemp(dir))
            return NULL;
        made = 1;
        atexit(remove_dir);
    }
    snprintf(path[slot], sizeof path[slot], "%s/%d", dir, slot);
    FILE *f = fopen(path[slot], "wb");
    if (!f)
        return NULL;
    const int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? path[slot] : NULL;
}

char *fuzz_text(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text) {
        memcpy(text, data, size);
        text[size] = '\0';
    }
    return text;
}
