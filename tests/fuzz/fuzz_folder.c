/* An image folder's listing over a tree the input describes: one entry a
 * line, "<kind> <path>" with kind d (directory), f (a file holding the rest
 * of the line), p (a FIFO), l (a symbolic link: "l path target"), paths of
 * [a-z0-9._/] under a private root, at most 48 lines.  Whatever the tree
 * (FIFOs named like images, links in loops, files where folders belong), the
 * listing ends, refuses or lists, and what it lists is consistent: every
 * image labelled below the class count.  Nothing is ever opened but
 * directories and the regular files the decoder reads. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "shmtrain/data.h"

static char root[256];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(path);
}

static bool clean_path(const char *p)
{
    if (!*p || *p == '/' || strstr(p, "..") || strlen(p) > 64)
        return false;
    for (; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789._/", *p))
            return false;
    return true;
}

/* One line of the description made under root. */
static void make_entry(char *line)
{
    if (strlen(line) < 3 || line[1] != ' ')
        return;
    char *path = line + 2, *rest = strchr(path, ' ');
    if (rest)
        *rest++ = '\0';
    char full[512];
    if (!clean_path(path))
        return;
    snprintf(full, sizeof full, "%s/%s", root, path);
    if (line[0] == 'd') {
        mkdir(full, 0700);
    } else if (line[0] == 'p') {
        mkfifo(full, 0600);
    } else if (line[0] == 'l' && rest && clean_path(rest)) {
        if (symlink(rest, full) != 0)
            return;
    } else if (line[0] == 'f') {
        /* O_EXCL: a path the description made a FIFO before would block this
         * open until a reader came (found by this fuzzer, "p x" then "f x") */
        const int fd = open(full, O_WRONLY | O_CREAT | O_EXCL, 0600);
        const char *body = rest ? rest : "";
        if (fd < 0)
            return;
        const bool whole = write(fd, body, strlen(body)) == (ssize_t)strlen(body);
        close(fd);
        if (!whole)
            remove(full);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/fuzz-folder.%d", (int)getpid());
    }
    nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (mkdir(root, 0700) != 0)
        return 0;
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    int lines = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && lines < 48;
         line = strtok_r(NULL, "\n", &save), lines++)
        make_entry(line);
    free(text);
    const st_image_spec spec = {.channels = 3, .height = 4, .width = 4};
    st_folder *f = NULL;
    if (st_folder_open(&f, root, &spec) == ST_OK) {
        st_dataset *labels = NULL;
        fuzz_assert(st_folder_count(f, 0) >= 1);
        if (st_folder_labels(f, 0, &labels) == ST_OK) {
            fuzz_assert(st_dataset_max_label(labels) < 256);
            st_dataset_destroy(labels);
        }
        st_folder_destroy(f);
    }
    nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
