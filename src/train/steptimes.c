/* Where each instance's steps went (steptimes.h). */
#include "steptimes.h"

#include <math.h>
#include <stdbool.h>

#define FIRST_EDGE 1e-5  /* seconds: the first bin's upper edge */
#define GROWTH 1.02

static double upper_edge(int bin) { return FIRST_EDGE * pow(GROWTH, bin); }

void step_times_add(struct step_times *s, double step_s, double compute_s, double exchange_s, double wait_s)
{
    int bin = step_s <= FIRST_EDGE ? 0 : (int)ceil(log(step_s / FIRST_EDGE) / log(GROWTH));
    if (bin >= STEP_TIME_BINS)
        bin = STEP_TIME_BINS - 1;
    if (bin > 0 && upper_edge(bin - 1) >= step_s)  /* log's round-off at an edge */
        bin--;
    s->bins[bin]++;
    if (++s->steps > s->warm_steps) {
        s->steady_steps++;
        s->steady_s += step_s;
    }
    if (step_s > s->max_s)
        s->max_s = step_s;
    s->compute_s += compute_s;
    s->exchange_s += exchange_s;
    s->wait_s += wait_s;
}

double step_times_steady_rate(const struct step_times *s, double per_step)
{
    const bool steady = s->steady_s > 0;
    const double seconds = steady ? s->steady_s : s->compute_s + s->exchange_s;
    return seconds > 0 ? per_step * (double)(steady ? s->steady_steps : s->steps) / seconds : 0;
}

double step_times_quantile(const struct step_times *s, double q)
{
    if (s->steps == 0)
        return 0;
    const double want = ceil(q * (double)s->steps);
    double seen = 0;
    for (int b = 0; b < STEP_TIME_BINS; b++)
        if ((seen += s->bins[b]) >= want)
            return fmin(upper_edge(b), s->max_s);  /* never past the slowest step itself */
    return s->max_s;
}
