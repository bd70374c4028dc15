/* The kernel tuner (include/shmtrain/tune.h, issue 66): its answer kept
 * and read back under its key, a kept answer that is not this request's
 * measured again, only kernel switches ever taken from a file, the
 * caller's switches kept, and a cache it cannot write a warning with the
 * answer intact, a switch kept only where it wins two races in a row (its
 * races scripted).  What it picks is the machine's business; that each
 * switch computes what the defaults do is test_switches'. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shmtrain/nn.h"
#include "shmtrain/tune.h"
#include "tune_kept.h"

static const char *const MODEL = "input 1 28 28\nconv 8 k3\nrelu\nmaxpool k2\nlinear 10\n";

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char text[8192];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static void spill(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static st_nn_tune_request request(const st_model *m, const char *dir)
{
    return (st_nn_tune_request){.model = m, .net = {.batch = 8}, .threads = 1, .cache_dir = dir,
                                .machine = "a test CPU"};
}

/* Measured once and kept; read back, not measured, the second time; an
 * answer edited to name a kernel switch (and a switch that is no kernel
 * choice) is taken as far as it may be. */
static void test_kept_and_read_back(void **state)
{
    (void)state;
    char dir[] = "/tmp/st-tune-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[300];
    snprintf(sub, sizeof sub, "%s/a/b", dir);  /* folders made on the way */
    st_model *m = NULL;
    assert_int_equal(st_model_parse(&m, MODEL, "tune"), ST_OK);
    st_nn_tune_request rq = request(m, sub);
    rq.force = true;
    st_nn_tuned first;
    assert_int_equal(st_nn_tune(&rq, &first), ST_OK);
    assert_false(first.cached);
    assert_true(first.tried >= 10 && first.timed <= first.tried && first.measure_s > 0);
    const char *text = slurp(first.cache_file);
    assert_non_null(text);
    assert_non_null(strstr(text, "machine a test CPU\n"));
    assert_non_null(strstr(text, "batch 8\nthreads 1\nprecision fp32\nswitches\nchose "));
    rq.force = false;
    st_nn_tuned again;
    assert_int_equal(st_nn_tune(&rq, &again), ST_OK);
    assert_true(again.cached && again.measure_s == 0);
    assert_string_equal(again.chose, first.chose);
    assert_memory_equal(&again.tuning, &first.tuning, sizeof first.tuning);
    /* the answer rewritten: a kernel switch taken, a switch that is none not */
    char edited[8192];
    snprintf(edited, sizeof edited, "%.*schose SHMTRAIN_ONEDNN_POOL (0.90 of the step) SHMTRAIN_NN_VERBOSE\n",
             (int)(strstr(text, "chose ") - text), text);
    spill(first.cache_file, edited);
    assert_int_equal(st_nn_tune(&rq, &again), ST_OK);
    assert_true(again.cached && again.tuning.onednn_pool && !again.tuning.verbose);
    rq.force = true;  /* measured again, whatever is kept, and kept anew */
    assert_int_equal(st_nn_tune(&rq, &again), ST_OK);
    assert_true(!again.cached && again.measure_s > 0);
    assert_null(strstr(slurp(first.cache_file), "SHMTRAIN_NN_VERBOSE"));
    rq.force = false;
    spill(first.cache_file, edited);
    /* another request's answer under this name (a model of another text):
     * not trusted, measured again and rewritten */
    st_model *other = NULL;
    assert_int_equal(st_model_parse(&other, "input 1 28 28\nconv 4 k3\nrelu\nmaxpool k2\nlinear 10\n", "tune"), ST_OK);
    st_nn_tune_request orq = request(other, sub);
    orq.cached_only = true;
    st_nn_tuned none;
    assert_int_equal(st_nn_tune(&orq, &none), ST_OK);
    assert_false(none.cached);
    assert_string_equal(none.chose, "the defaults");
    assert_false(none.tuning.onednn_pool);
    char moved[sizeof none.cache_file];
    snprintf(moved, sizeof moved, "%s", none.cache_file);
    assert_int_equal(rename(first.cache_file, moved), 0);  /* m's answer where other's belongs */
    orq.cached_only = false;
    assert_int_equal(st_nn_tune(&orq, &none), ST_OK);
    assert_false(none.cached);
    assert_true(none.measure_s > 0);
    assert_null(strstr(slurp(moved), "SHMTRAIN_NN_VERBOSE"));
    st_model_destroy(other);
    st_model_destroy(m);
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    assert_int_equal(system(rm), 0);
}

/* The caller's own switches stay on and are part of the key; a folder it
 * cannot write: ST_ERR_IO, the answer still given, nothing said kept. */
static void test_callers_switches_and_unwritable_cache(void **state)
{
    (void)state;
    st_model *m = NULL;
    assert_int_equal(st_model_parse(&m, MODEL, "tune"), ST_OK);
    char dir[] = "/tmp/st-tune-XXXXXX";
    assert_non_null(mkdtemp(dir));
    st_nn_tune_request rq = request(m, dir);
    rq.net.tuning.no_chunks = true;
    st_nn_tuned out;
    assert_int_equal(st_nn_tune(&rq, &out), ST_OK);
    assert_true(out.tuning.no_chunks);
    assert_non_null(strstr(slurp(out.cache_file), "switches SHMTRAIN_ONEDNN_NO_CHUNKS\n"));
    char file[200];
    snprintf(file, sizeof file, "%s/a-file", dir);
    spill(file, "not a folder\n");
    rq.cache_dir = file;
    assert_int_equal(st_nn_tune(&rq, &out), ST_ERR_IO);
    assert_string_equal(out.cache_file, "");
    assert_true(out.tuning.no_chunks && out.chose[0] != '\0');
    assert_non_null(strstr(st_last_error(), "a-file"));
    st_model_destroy(m);
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    assert_int_equal(system(rm), 0);
}

/* Scripted races: a candidate's first race gives first_ratio; a race right
 * after a win (below tune.h's 3%) gives second_ratio. */
static int races;
static double first_ratio, second_ratio;
static bool after_a_win;

static st_status scripted(const void *arg, st_net *best, st_net *candidate, double *ratio)
{
    (void)arg, (void)best, (void)candidate;
    races++;
    *ratio = after_a_win ? second_ratio : first_ratio;
    after_a_win = !after_a_win && *ratio < 0.97;
    return ST_OK;
}

/* A win that does not repeat at once is noise, and nothing is kept; a win
 * that does is kept at its second ratio; a loss is raced once. */
static void test_a_win_must_repeat(void **state)
{
    (void)state;
    st_model *m = NULL;
    assert_int_equal(st_model_parse(&m, MODEL, "tune"), ST_OK);
    const st_nn_tune_request rq = request(m, NULL);
    st_nn_tuned out;
    nn_tune_set_race(scripted);
    races = 0, first_ratio = 0.5, second_ratio = 1.0;
    assert_int_equal(st_nn_tune(&rq, &out), ST_OK);
    assert_true(out.timed > 0);
    assert_int_equal(races, 2 * out.timed);
    assert_string_equal(out.chose, "the defaults");
    races = 0, first_ratio = 1.0, second_ratio = 0.5;  /* lost the first: no second race */
    assert_int_equal(st_nn_tune(&rq, &out), ST_OK);
    assert_int_equal(races, out.timed);
    assert_string_equal(out.chose, "the defaults");
    races = 0, first_ratio = 0.5, second_ratio = 0.9;
    assert_int_equal(st_nn_tune(&rq, &out), ST_OK);
    assert_non_null(strstr(out.chose, " (0.90 of the step)"));
    nn_tune_set_race(NULL);
    st_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_and_read_back),
        cmocka_unit_test(test_callers_switches_and_unwritable_cache),
        cmocka_unit_test(test_a_win_must_repeat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
