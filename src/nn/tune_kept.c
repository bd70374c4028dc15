/* A kept answer of the kernel tuner, read from its file's text (tune_kept.h). */
#include "tune_kept.h"

#include <stdio.h>
#include <string.h>

#include "shmtrain/tuning.h"

bool nn_tune_read_kept(const char *text, const char *key, st_nn_tuned *out)
{
    const size_t k = strlen(key);
    if (strncmp(text, key, k) || strncmp(text + k, "chose ", 6))
        return false;  /* another key under the same hash, or a cut file: measure */
    const char *line = text + k + 6;
    const int len = (int)strcspn(line, "\n");
    snprintf(out->chose, sizeof out->chose, "%.*s", len, line);
    int n;
    const st_nn_switch *sw = st_nn_switches(&n);
    for (int i = 0; i < n; i++) {
        const size_t name = strlen(sw[i].env);
        for (const char *p = strstr(out->chose, sw[i].env); p; p = strstr(p + 1, sw[i].env))
            if ((p == out->chose || p[-1] == ' ') && (p[name] == ' ' || p[name] == '\0'))
                *(bool *)((char *)&out->tuning + sw[i].offset) = sw[i].kernel;
    }
    return true;
}
