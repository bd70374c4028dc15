#define _GNU_SOURCE
#include "shmtrain/clock.h"

#include <time.h>

double st_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
