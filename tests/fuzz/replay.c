/* The suite's side of a fuzz harness (fuzz.h): every file named, or in a
 * directory named, goes through LLVMFuzzerTestOneInput once, in name order.
 * Built with the project's compiler, so the ASan build replays the corpus
 * and every regression under its sanitizers too. */
#define _GNU_SOURCE
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: cannot open\n", path);
        return -1;
    }
    uint8_t *data = NULL;
    size_t size = 0, cap = 0, n;
    uint8_t buf[65536];
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (size + n > cap) {
            cap = 2 * (size + n);
            uint8_t *grown = realloc(data, cap);
            if (!grown) {
                free(data);
                fclose(f);
                return -1;
            }
            data = grown;
        }
        memcpy(data + size, buf, n);
        size += n;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data ? data : buf, size);
    free(data);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int main(int argc, char **argv)
{
    int files = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            failed |= replay_file(argv[i]) != 0, files++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, by_name);
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            if (names[k]->d_name[0] != '.' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
                failed |= replay_file(path) != 0, files++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d input%s\n", files, files == 1 ? "" : "s");
    return failed || files == 0;
}
