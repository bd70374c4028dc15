/* Would a single-copy transport pay here?  Linux's cross-memory attach
 * (process_vm_readv: one process reads another's pages, Open MPI's smsc/cma)
 * against a plain memcpy of the same bytes, in one process and its forked
 * child, for messages of MIN..MAX bytes (x4 each step).
 *
 *   st-cma-probe [--min BYTES] [--max BYTES] [--reps R]
 *
 * A staged all-reduce moves about 4.5 message sizes a rank at 2 ranks (a
 * copy into the segment, sums, copies out: docs/collectives.md); one that
 * read its peer's buffer in place would move about 2.5, so it wins only
 * where the kernel's copy runs at more than ~0.55 of memcpy's rate.  The
 * table says which: each size's best of R tries, both ways, interleaved.
 * Exit 2 where the kernel refuses (no ptrace rights: a container without
 * CAP_SYS_PTRACE, Yama's ptrace_scope). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t bytes_arg(const char *flag, const char *v)
{
    char *end;
    const unsigned long long n = strtoull(v, &end, 10);
    const unsigned long long k = *end == 'K' ? 1ull << 10 : *end == 'M' ? 1ull << 20 : *end == 0 ? 1 : 0;
    if (!k || (*end && end[1]) || n == 0 || n > (1ull << 34) / k) {
        fprintf(stderr, "st-cma-probe: %s %s: not a size in bytes (K, M allowed; 1 .. 16G)\n", flag, v);
        exit(1);
    }
    return (size_t)(n * k);
}

/* The best of `reps` tries of each way at `n` bytes, alternating. */
static int time_size(pid_t child, char *theirs, char *mine, size_t n, int reps, double *cma, double *copy)
{
    *cma = *copy = 1e30;
    for (int r = 0; r < reps; r++) {
        struct iovec local = {mine, n}, remote = {theirs, n};
        double t0 = now();
        const ssize_t got = process_vm_readv(child, &local, 1, &remote, 1, 0);
        double t1 = now();
        if (got != (ssize_t)n) {
            fprintf(stderr, "st-cma-probe: process_vm_readv of %zu bytes: %s\n", n,
                    got < 0 ? strerror(errno) : "a short read");
            return errno == EPERM || errno == ENOSYS ? 2 : 1;
        }
        *cma = t1 - t0 < *cma ? t1 - t0 : *cma;
        t0 = now();
        memcpy(mine, theirs, n);  /* the parent's own copy of the same pages (forked: same contents) */
        t1 = now();
        *copy = t1 - t0 < *copy ? t1 - t0 : *copy;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t lo = 64 << 10, hi = 16 << 20;
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--min"))
            lo = bytes_arg(argv[i], argv[i + 1]), i++;
        else if (i + 1 < argc && !strcmp(argv[i], "--max"))
            hi = bytes_arg(argv[i], argv[i + 1]), i++;
        else if (i + 1 < argc && !strcmp(argv[i], "--reps") && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: st-cma-probe [--min BYTES] [--max BYTES] [--reps R >= 1]\n");
            return 1;
        }
    }
    char *theirs = mmap(NULL, hi, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *mine = mmap(NULL, hi, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (theirs == MAP_FAILED || mine == MAP_FAILED) {
        fprintf(stderr, "st-cma-probe: %zu bytes twice: %s\n", hi, strerror(errno));
        return 1;
    }
    memset(theirs, 1, hi);
    memset(mine, 0, hi);
    const pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "st-cma-probe: fork: %s\n", strerror(errno));
        return 1;
    }
    if (child == 0) {  /* its pages are read from the parent; it only waits */
        pause();
        _exit(0);
    }
    printf("| bytes | process_vm_readv us | GB/s | memcpy us | GB/s | readv / memcpy rate |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    for (size_t n = lo; n <= hi && !rc; n *= 4) {
        double cma, copy;
        rc = time_size(child, theirs, mine, n, reps, &cma, &copy);
        if (!rc)
            printf("| %zu | %.1f | %.1f | %.1f | %.1f | %.2f |\n", n, cma * 1e6, (double)n / cma * 1e-9, copy * 1e6,
                   (double)n / copy * 1e-9, copy / cma);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return rc;
}
