#define _GNU_SOURCE
/* The sweep's reports (launcher/sweep/sweep_report.c) from recorded
 * results: CSV, markdown with the best setting and the ratios, JSON, and
 * gnuplot's plots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "forkranks.h"
#include "sweep_fixture.h"

/* -------------------------------------------------------------- reports -- */

struct report_args {
    struct sweep_setting s[3];
    struct sweep_run runs[16];
    int nruns;
    struct sweep_summary sums[3 * SWEEP_NSYSTEMS];
    struct sweep_report rep;
};

static void setup_report(struct report_args *x, struct sweep_target target)
{
    memset(x, 0, sizeof *x);
    x->nruns = recorded(x->s, x->runs);
    sweep_summarize(x->runs, x->nruns, 3, x->sums);
    x->rep = (struct sweep_report){.command = "shmtrain --model mlp", .repeats = 3, .target = target,
                                   .torch_asked = true, .torch_available = true, .plots_note = NULL};
    x->rep.topo.cores = 2;
    x->rep.topo.pus = 2;
    snprintf(x->rep.topo.cpu_model, sizeof x->rep.topo.cpu_model, "Test CPU");
    snprintf(x->rep.versions.onednn, sizeof x->rep.versions.onednn, "2.6.3");
    snprintf(x->rep.versions.torch, sizeof x->rep.versions.torch, "1.13.1");
}

/* The CPU probe's figures for two CPUs that give 1.5 CPUs' worth at once. */
static void probed_at_one_and_a_half(struct sweep_report *rep)
{
    rep->probe_cpus = 2;
    rep->probe_one_gflops = 120;
    rep->probe_all_gflops = 180;
}

static void csv_of(FILE *f, void *p)
{
    struct report_args *x = p;
    sweep_write_csv(f, x->s, x->runs, x->nruns);
}

static void md_of(FILE *f, void *p)
{
    struct report_args *x = p;
    sweep_write_markdown(f, &x->rep, x->s, 3, x->sums);
}

static void json_of(FILE *f, void *p)
{
    struct report_args *x = p;
    sweep_write_json(f, &x->rep, x->s, 3, x->runs, x->nruns, x->sums);
}

static void test_csv(void **state)
{
    (void)state;
    struct report_args x;
    setup_report(&x, NO_TARGET);
    char *csv = written(csv_of, &x);
    assert_int_equal(count_lines(csv), 1 + x.nruns);
    assert_true(strncmp(csv, "setting,instances,cores_per_instance,system,repeat,order,ok,samples_per_s,", 72) == 0);
    assert_non_null(strstr(csv, "\n1x2,1,2,shmtrain,1,1,1,100.0,640.000,4.000,1.000,0.500,0.250,3.00,0.8000,0.5000,"
                                "100.0,100.0,10.00,300,fp32,\n"));
    /* The failed run: empty numbers, its error quoted (it has a comma). */
    assert_non_null(strstr(csv, "\n2x1,2,1,shmtrain,3,9,0,,,4.000,1.000,0.500,0.250,,0.8200,0.4800,102.0,202.0,10.00,300,"
                                "fp32,\"an instance failed, exit 1\"\n"));
    assert_non_null(strstr(csv, "\n1x2,1,2,pytorch-ddp,1,10,1,50.0,1.280,1.000,,,,,0.7000,,300.0,300.0,20.00,0,,\n"));
    free(csv);
}

static void test_markdown_marks_best_and_ratios(void **state)
{
    (void)state;
    struct report_args x;
    setup_report(&x, NO_TARGET);
    char *md = written(md_of, &x);
    assert_non_null(strstr(md, "`shmtrain --model mlp`"));
    assert_non_null(strstr(md, "| setting | asked | precision | samples/s | vs 1x2 |"));
    assert_null(strstr(md, "time to"));  /* no target, no column */
    /* 2x1 is best (175 vs 110: 1.59x), the baseline row is 1.00x, and
     * against PyTorch's 50 samples/s the baseline is 2.20x. */
    assert_non_null(strstr(md, "| **2x1** (1 of 3 runs FAILED) | 2x1 | fp32 | 175 (150–200) | 1.59x |"));
    assert_non_null(strstr(md, "| 1x2 | 1x2 | fp32 | 110 (100–120) | 1.00x |"));
    assert_non_null(strstr(md, "| 50 (50–50) | 2.20x | - | - |"));  /* gloo's baseline; shm did not run it */
    assert_non_null(strstr(md, " PyTorch DDP (gloo) samples/s | shmtrain / PyTorch DDP (gloo) | PyTorch DDP (shm) "
                               "samples/s | shmtrain / PyTorch DDP (shm) | independent (no exchange) samples/s | "
                               "shmtrain / independent (no exchange) |\n"));
    /* 2x1: 175 against DDP over shm's 70 (one run), and 0.70 of its instances alone (250) */
    assert_non_null(strstr(md, "| rank 1: 1.25x, p90 6.00 ms | - | - | 70 | 2.50x | 250 | 0.70x |\n"));
    assert_non_null(strstr(md, "| 81.00 | 102 / 102 | - | - |"));  /* 1x1: one instance, none slower */
    assert_non_null(strstr(md, "shmtrain / independent is what synchronising costs"));
    assert_non_null(strstr(md, "**Best: 2x1**, by median throughput (1.59x the throughput of 1x2)"));
    assert_non_null(strstr(md, "| CPU | Test CPU |"));
    assert_non_null(strstr(md, "| PyTorch | 1.13.1 |"));
    assert_null(strstr(md, "| arithmetic |"));  /* not probed, no row */
    assert_non_null(strstr(md, "![throughput](throughput.svg)"));
    /* Rows have as many cells as the header, the one with a failed run too. */
    const char *header = strstr(md, "| setting |");
    int hc = 0;
    for (const char *p = header; *p != '\n'; p++)
        hc += *p == '|';
    const char *rows[] = {"| 1x1 |", "| **2x1** (", "| 1x2 |"};
    for (int k = 0; k < 3; k++) {
        int rc = 0;
        for (const char *p = strstr(md, rows[k]); *p != '\n'; p++)
            rc += *p == '|';
        assert_int_equal(hc, rc);
    }
    free(md);

    setup_report(&x, ACCURACY(0.85));
    x.rep.plots_note = "gnuplot is not installed";
    md = written(md_of, &x);
    assert_non_null(strstr(md, "time to 85% (s)"));
    assert_non_null(strstr(md, "**Best: 1x2**, by median time to the target accuracy"));
    assert_non_null(strstr(md, "| 5.0 (5.0–5.0) (2 of 3) |"));  /* 1x1 reached it twice */
    assert_non_null(strstr(md, "Plots: gnuplot is not installed"));
    assert_null(strstr(md, "![throughput]"));
    free(md);

    setup_report(&x, LOSS(1.5));  /* a language model's sweep */
    md = written(md_of, &x);
    assert_non_null(strstr(md, "time to loss 1.5 (s)"));
    assert_non_null(strstr(md, "final validation loss |"));
    assert_null(strstr(md, "final test acc."));
    free(md);

    /* The CPU probe's row. */
    probed_at_one_and_a_half(&x.rep);
    md = written(md_of, &x);
    assert_non_null(strstr(md, "| arithmetic | its 2 CPUs at once: 1.50x one CPU's multiply-add throughput (2 real "
                               "cores: 2.00x; 120 GFLOPS f32 alone) |"));
    free(md);
}

static void test_json(void **state)
{
    (void)state;
    struct report_args x;
    setup_report(&x, NO_TARGET);
    char *js = written(json_of, &x);
    assert_non_null(strstr(js, "\"best\":\"2x1\",\"best_by\":\"throughput\""));
    assert_non_null(strstr(js, "\"samples_per_s\":{\"median\":175.0,\"min\":150.0,\"max\":200.0,\"n\":2}"));
    assert_non_null(strstr(js, "\"pytorch-ddp\":{\"runs\":2,\"failed\":0"));
    assert_non_null(strstr(js, "\"slowest_rank\":1,\"slowest_over_fastest\":1.250,\"slowest_p90_ms\":6.000}"));
    assert_non_null(strstr(js, "\"shmtrain-independent\":{\"runs\":1,\"failed\":0"));
    assert_non_null(strstr(js, "\"error\":\"an instance failed, exit 1\""));
    assert_non_null(strstr(js, "\"curve\":[[1.000,0.50000],[2.000,0.80000]]"));
    assert_non_null(strstr(js, "\"torch\":\"1.13.1\""));
    assert_null(strstr(js, "cpu_probe"));
    free(js);
    probed_at_one_and_a_half(&x.rep);
    js = written(json_of, &x);
    assert_non_null(strstr(js, "\"cpu_probe\":{\"cpus\":2,\"one_gflops\":120.0,\"all_gflops\":180.0}}"));
    /* Balanced brackets: a cheap structural check the real parser (python in
     * the sweep test) backs up. */
    int depth = 0;
    bool in_string = false;
    for (const char *p = js; *p; p++) {
        if (*p == '"' && p[-1] != '\\')
            in_string = !in_string;
        if (!in_string)
            depth += (*p == '{' || *p == '[') - (*p == '}' || *p == ']');
        assert_true(depth >= 0);
    }
    assert_int_equal(depth, 0);
    free(js);
}

static void test_plots(void **state)
{
    (void)state;
    struct report_args x;
    setup_report(&x, NO_TARGET);
    char dir[] = "/tmp/test_sweep.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[5][300];
    const char *names[5] = {"throughput.dat", "timesplit.dat", "accuracy.dat", "plot.gp", "instances.dat"};
    FILE *f[5];
    for (int i = 0; i < 5; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, names[i]);
        f[i] = fopen(path[i], "w");
        assert_non_null(f[i]);
    }
    sweep_write_plot_data(f[0], f[1], f[2], f[4], x.s, 3, x.runs, x.sums, false);
    sweep_write_gnuplot(f[3], x.s, 3, x.runs, x.sums, false);
    for (int i = 0; i < 5; i++)
        fclose(f[i]);
    /* 2x1's median repeat (200 samples/s, the first of the two as close): its two instances, one block */
    char *inst = slurp(path[4]);
    assert_non_null(strstr(inst, "\n# 2x1\n0 4.000 1.000 5.000\n1 5.000 0.000 6.000\n\n\n"));
    assert_null(strstr(inst, "# 1x2"));  /* one instance: nothing to compare */
    free(inst);
    char *tp = slurp(path[0]), *sp = slurp(path[1]), *cv = slurp(path[2]);
    assert_non_null(strstr(tp, "\n1 2 1x2 110.0 100.0 120.0 50.0 50.0 50.0 - - - - - -\n"));
    assert_non_null(strstr(tp, "\n1 1 1x1 90.0 90.0 90.0 - - - - - - - - -\n"));
    assert_non_null(strstr(tp, "\n2 1 2x1 175.0 150.0 200.0 - - - 70.0 70.0 70.0 250.0 250.0 250.0\n"));
    assert_non_null(strstr(sp, "\n2x1 4.000 1.000 0.500 0.250\n"));
    int blocks = 0;
    for (const char *p = cv; (p = strstr(p, "# ")) != NULL; p++)
        blocks++;
    assert_int_equal(blocks, 5);  /* three shmtrain settings and PyTorch's one over each backend */
    char *gp = slurp(path[3]);
    assert_non_null(strstr(gp, "'' using 1:10:11:12 with yerrorlines"));  /* DDP over shm's columns */
    assert_non_null(strstr(gp, "title 'PyTorch DDP (shm)'"));
    assert_non_null(strstr(gp, "'instances.dat' index 0 using 1:2 with linespoints lw 2 pt 7 lc 3 title '2x1 compute'"));
    free(gp);
    if (access("/usr/bin/gnuplot", X_OK) == 0) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "cd %s && gnuplot plot.gp 2>gnuplot.err", dir);
        assert_int_equal(system(cmd), 0);
        for (int i = 0; i < 4; i++) {
            const char *svg[] = {"throughput.svg", "timesplit.svg", "accuracy.svg", "instances.svg"};
            snprintf(cmd, sizeof cmd, "%s/%s", dir, svg[i]);
            char *text = slurp(cmd);
            assert_non_null(text);
            assert_non_null(strstr(text, "<svg"));
            free(text);
        }
    } else {
        printf("gnuplot absent: the script was written but not drawn\n");
    }
    free(tp), free(sp), free(cv);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_markdown_marks_best_and_ratios),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_plots),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
