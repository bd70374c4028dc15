/* Objects published read-only in /dev/shm (published.h). */
#define _GNU_SOURCE
#include "published.h"
#include "shmtrain/shmname.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

st_status published_create(const char *name, size_t bytes, const char *what, void **map)
{
    *map = NULL;
    int fd = st_shm_create(name);
    if (fd < 0 && errno == EEXIST)
        return st_fail(ST_ERR_EXISTS, "%s: %s%s already exists: another job uses this job id, or a killed one "
                                      "left it (remove it or pick another job id)", what, ST_SHM_DIR, name);
    if (fd < 0)
        return st_fail(ST_ERR_SYS, "%s: shm_open(%s) failed: %s", what, name, strerror(errno));
    st_status st = ST_OK;
    int rc = ftruncate(fd, (off_t)bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
    void *m = MAP_FAILED;
    if (rc == EFBIG)
        st = st_fail(ST_ERR_SYS, "%s: the shared %s of %.1f MiB exceeds this process's file-size limit (ulimit -f)",
                     what, what, bytes / 1048576.0);
    else if (rc != 0)
        st = st_fail(rc == ENOSPC ? ST_ERR_SHM_SPACE : ST_ERR_SYS,
                     "%s: cannot allocate %.1f MiB in /dev/shm for the shared %s (%s); enlarge it "
                     "(docker run --shm-size=1g)", what, bytes / 1048576.0, what, strerror(rc));
    else if ((m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        st = st_fail(ST_ERR_SYS, "%s: mmap(%s) failed: %s", what, name, strerror(errno));
    close(fd);
    if (st != ST_OK) {
        shm_unlink(name);
        return st;
    }
    *map = m;
    return ST_OK;
}

st_status published_seal(const char *name, void *map, size_t bytes, uint64_t magic)
{
    __atomic_store_n((uint64_t *)map, magic, __ATOMIC_RELEASE);  /* last: attachers check it */
    if (mprotect(map, bytes, PROT_READ) == 0)
        return ST_OK;
    st_status st = st_fail(ST_ERR_SYS, "mprotect(%s) failed: %s", name, strerror(errno));
    munmap(map, bytes);
    shm_unlink(name);
    return st;
}

st_status published_attach(const char *name, size_t min_bytes, const char *what, uint64_t magic, void **map,
                           size_t *bytes)
{
    *map = NULL;
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return st_fail(ST_ERR_SYS, "%s: shared %s %s: %s", what, what, name, strerror(errno));
    struct stat sb;
    void *m = MAP_FAILED;
    if (fstat(fd, &sb) != 0 || sb.st_uid != geteuid() || (size_t)sb.st_size < min_bytes ||
        (m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED) {
        close(fd);
        return st_fail(ST_ERR_SYS, "%s: cannot map the shared %s %s", what, what, name);
    }
    /* MAP_POPULATE: the pages (in memory already) entered in this process's
     * tables now, not one fault at a time in the steps that first read them */
    close(fd);
    if ((size_t)sb.st_size < sizeof magic || __atomic_load_n((const uint64_t *)m, __ATOMIC_ACQUIRE) != magic) {
        munmap(m, (size_t)sb.st_size);
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a complete published %s", what, name, what);
    }
    *map = m;
    *bytes = (size_t)sb.st_size;
    return ST_OK;
}
