#include "shmtrain/paths.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

bool st_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

char *st_path_folder(const char *path, char *buf, size_t len)
{
    const char *slash = strrchr(path, '/');
    snprintf(buf, len, "%.*s", slash ? (int)(slash - path + (slash == path)) : 1, slash ? path : ".");
    return buf;
}
