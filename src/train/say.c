/* The trainer's voice on the console (trainer.h): rank 0's lines, none
 * under --quiet, each over a progress line a terminal shows.  Below the
 * loop, its reports and its keeper, which all speak through it. */
#include <stdarg.h>
#include <stdio.h>

#include "trainer.h"

void train_say(const struct trainer *t, const char *fmt, ...)
{
    if (t->rank != 0)
        return;
    va_list ap;
    if (t->o->quiet)
        return;
    if (t->tty)
        fputs("\r\033[K", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}
