/* sweep_output: a finished sweep's files.  See sweep_output.h. */
#define _GNU_SOURCE
#include "sweep_output.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "sweep.h"
#include "sweep_peer.h"

void sweep_describe_machine(struct sweep_report *rep, const st_topo *t, const struct sweep_job *j)
{
    st_topo_get_info(t, &rep->topo);
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(rep->kernel, sizeof rep->kernel, "%.20s %.100s", u.sysname, u.release);
    snprintf(rep->compiler, sizeof rep->compiler, "gcc %s", __VERSION__);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(rep->date, sizeof rep->date, "%Y-%m-%d %H:%M UTC", &tm);
    snprintf(rep->shmrun_version, sizeof rep->shmrun_version, "%s", j->version);
    rep->repeats = j->repeats;
    rep->target = j->target;
}

static FILE *open_out(const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "shmrun: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *name)
{
    if (!f)
        return -1;
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "shmrun: writing %s failed\n", name);
        return -1;
    }
    return 0;
}

/* Data, script, and the SVGs when gnuplot is here.  Returns NULL when the
 * plots were drawn, else why not (for the report). */
static const char *draw_plots(const struct sweep_job *j, const struct sweep_setting *s, int ns,
                              const struct sweep_run *runs, const struct sweep_summary *sums)
{
    FILE *tp = open_out(j->out_dir, "throughput.dat"), *sp = open_out(j->out_dir, "timesplit.dat");
    FILE *cv = open_out(j->out_dir, "accuracy.dat"), *gp = open_out(j->out_dir, "plot.gp");
    FILE *in = open_out(j->out_dir, "instances.dat");
    if (tp && sp && cv && gp && in) {
        sweep_write_plot_data(tp, sp, cv, in, s, ns, runs, sums, j->target.loss);
        sweep_write_gnuplot(gp, s, ns, runs, sums, j->target.loss);
    }
    int bad = close_out(tp, "throughput.dat") | close_out(sp, "timesplit.dat") | close_out(cv, "accuracy.dat") |
              close_out(gp, "plot.gp") | close_out(in, "instances.dat");
    if (bad)
        return "the plot data could not be written";
    char *probe[] = {"gnuplot", "--version", NULL};
    if (sweep_run_quietly(probe, NULL, NULL) != 0)
        return "gnuplot is not installed (apt install gnuplot-nox), so the report is table-only; "
               "`gnuplot plot.gp` in this directory draws them later";
    char *draw[] = {"gnuplot", "plot.gp", NULL};
    if (sweep_run_quietly(draw, j->out_dir, "plot.log") != 0)
        return "gnuplot failed (see plot.log)";
    return NULL;
}

int sweep_write_outputs(const struct sweep_job *j, struct sweep_report *rep, const struct sweep_setting *s, int ns,
                         const struct sweep_run *runs, int nruns)
{
    struct sweep_summary sums[SWEEP_MAX_SETTINGS * SWEEP_NSYSTEMS];
    sweep_summarize(runs, nruns, ns, sums);
    rep->plots_note = draw_plots(j, s, ns, runs, sums);
    FILE *csv = open_out(j->out_dir, "runs.csv"), *json = open_out(j->out_dir, "sweep.json");
    FILE *md = open_out(j->out_dir, "report.md");
    if (csv)
        sweep_write_csv(csv, s, runs, nruns);
    if (json)
        sweep_write_json(json, rep, s, ns, runs, nruns, sums);
    if (md)
        sweep_write_markdown(md, rep, s, ns, sums);
    int bad = close_out(csv, "runs.csv") | close_out(json, "sweep.json") | close_out(md, "report.md");
    if (!bad)
        sweep_write_markdown(stdout, rep, s, ns, sums);
    return bad ? -1 : 0;
}
