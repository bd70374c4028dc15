/* Files a program is handed: is an output the same file as an input,
 * through any path (a link, a hard link, another spelling)?  Implemented in
 * src/common/paths.c (libc only). */
#ifndef SHMTRAIN_PATHS_H
#define SHMTRAIN_PATHS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Do both name one existing file (the same device and inode)?  False when
 * either does not exist. */
bool st_same_file(const char *a, const char *b);

/* The folder a file named `path` lies in, as given ("runs/x" for
 * "runs/x/a.ckpt", "/" for "/a", "." for "a"), into buf; returns buf. */
char *st_path_folder(const char *path, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
