/* The one clock every module times with: monotonic seconds, as a double
 * (intervals only; nanosecond resolution for the first 100 days of uptime). */
#ifndef SHMTRAIN_CLOCK_H
#define SHMTRAIN_CLOCK_H

double st_now_s(void);

#endif
