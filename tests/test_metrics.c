/* The JSON writer and the metrics records: what the trainer writes, the
 * sweep reads back, field by field. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/json.h"
#include "shmtrain/metrics.h"

static char *capture(void (*fn)(FILE *, const void *), const void *arg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    fn(f, arg);
    assert_int_equal(fclose(f), 0);
    return text;
}

static void nested(FILE *f, const void *arg)
{
    (void)arg;
    st_json j;
    st_json_init(&j, f);
    st_json_object_begin(&j, NULL);
    st_json_string(&j, "s", "a\"b\\c\nd\x01");
    st_json_int(&j, "i", -3);
    st_json_uint(&j, "u", 18446744073709551615ull);
    st_json_number(&j, "x", 1.5, "%.2f");
    st_json_number(&j, "nan", NAN, "%.2f");
    st_json_bool(&j, "t", true);
    st_json_string(&j, "none", NULL);
    st_json_array_begin(&j, "a");
    st_json_int(&j, NULL, 1);
    st_json_array_begin(&j, NULL);
    st_json_array_end(&j);
    st_json_object_begin(&j, NULL);
    st_json_bool(&j, "f", false);
    st_json_object_end(&j);
    st_json_array_end(&j);
    st_json_object_end(&j);
}

static void test_json_writer(void **state)
{
    (void)state;
    char *text = capture(nested, NULL);
    assert_string_equal(text, "{\"s\":\"a\\\"b\\\\c\\u000ad\\u0001\",\"i\":-3,\"u\":18446744073709551615,\"x\":1.50,"
                              "\"nan\":null,\"t\":true,\"none\":null,\"a\":[1,[],{\"f\":false}]}");
    char s[32];
    st_json_get_string(text, "s", s, sizeof s);
    assert_string_equal(s, "a\"b\\c\\u000ad\\u0001");  /* \" and \\ undone, the rest as written */
    assert_true(st_json_get_number(text, "x") == 1.5);
    assert_true(isnan(st_json_get_number(text, "nan")));
    assert_true(isnan(st_json_get_number(text, "absent")));
    assert_null(st_json_find(text, "absent"));
    free(text);
}

static void write_records(FILE *f, const void *arg)
{
    const st_record *r = arg;
    for (int i = 0; i < 4; i++)
        st_metrics_write(f, &r[i]);
}

static void test_records_round_trip(void **state)
{
    (void)state;
    st_record in[4] = {
        {.type = ST_RECORD_RUN, .u.run = {.system = "shmtrain", .instances = 2, .threads = 1, .model = "my \"lenet\"",
                                          .params = 61706, .batch_per_instance = 64, .onednn = "2.6.3",
                                          .isa = "avx2", .first_step = 120, .balance = "dynamic",
                                          .grad_accum = 1, .lowp_layers = 3}},
        {.type = ST_RECORD_TRAIN, .u.train = {.step = 50, .epoch = 0.25, .loss = 0.5, .accuracy = 0.75, .lr = 0.05,
                                              .samples_per_s = 1234.5, .time_s = 2.5, .compute_s = 1.25,
                                              .allreduce_s = 0.125, .wait_s = 0.0625, .faults_said = true,
                                              .page_faults = 0}},
        {.type = ST_RECORD_EVAL, .u.eval = {.step = 100, .epoch = 1, .test_loss = 0.375, .test_accuracy = 0.875,
                                            .time_s = 3.5, .eval_s = 0.25}},
        {.type = ST_RECORD_SUMMARY, .u.summary = {.steps = 937, .instances = 2, .batch_per_instance = 64,
                                                  .total_s = 9.5, .train_s = 8.5, .samples_per_s = 7000,
                                                  .final_test_accuracy = 0.9, .best_test_accuracy = 0.91,
                                                  .nreached = 2, .reached_accuracy = {0.85, 0.89},
                                                  .reached_s = {4.25, 7.5}, .micro_batches = 5622,
                                                  .micro_batches_here = 2899, .allreduces_said = true,
                                                  .step_allreduces = 0, .samples_decoded = 185535}}};
    char *text = capture(write_records, in);
    assert_int_equal(strncmp(text, "{\"type\":\"run\",\"system\":\"shmtrain\",\"instances\":2,", 48), 0);
    assert_non_null(strstr(text, "\"time_to_accuracy_s\":{\"0.85\":4.25,\"0.89\":7.50}"));
    assert_null(strstr(text, "\"torch\""));  /* empty strings of other writers are left out */
    assert_null(strstr(text, "\"grad_accum\""));   /* one micro-batch a step: said by saying nothing */
    assert_null(strstr(text, "\"lowp_layers\""));  /* said with the layers only, and these are not said */
    assert_null(strstr(text, "\"backend\""));
    assert_null(strstr(text, "\"mode\""));
    st_record out[4];
    char *line = text;
    for (int i = 0; i < 4; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        assert_int_equal(st_metrics_parse(line, &out[i]), in[i].type);
        line = nl + 1;
    }
    assert_string_equal(line, "");
    assert_string_equal(out[0].u.run.model, "my \"lenet\"");
    assert_string_equal(out[0].u.run.isa, "avx2");
    assert_int_equal(out[0].u.run.params, 61706);
    assert_int_equal(out[0].u.run.first_step, 120);
    assert_int_equal(out[1].u.train.step, 50);
    assert_true(out[1].u.train.wait_s == 0.0625 && out[1].u.train.samples_per_s == 1234.5);
    assert_true(out[1].u.train.faults_said && out[1].u.train.page_faults == 0);  /* 0 is said, not left out */
    assert_true(out[2].u.eval.test_accuracy == 0.875 && out[2].u.eval.epoch == 1);
    assert_int_equal(out[3].u.summary.steps, 937);
    assert_int_equal(out[3].u.summary.nreached, 2);
    assert_string_equal(out[0].u.run.balance, "dynamic");
    assert_int_equal(out[3].u.summary.micro_batches, 5622);  /* not taken for micro_batches_here's */
    assert_int_equal(out[3].u.summary.micro_batches_here, 2899);
    assert_int_equal(out[3].u.summary.samples_decoded, 185535);
    assert_true(out[3].u.summary.allreduces_said && out[3].u.summary.step_allreduces == 0);  /* 0 is said */
    assert_true(out[3].u.summary.reached_accuracy[1] == 0.89 && out[3].u.summary.reached_s[1] == 7.5);
    st_record junk;
    /* the PyTorch peer's run record: its version, its all-reduce, its mode */
    const char *peer = "{\"type\":\"run\",\"system\":\"pytorch-ddp\",\"instances\":2,\"torch\":\"2.13.0+cpu\","
                       "\"backend\":\"shm\",\"mode\":\"channels_last\",\"first_step\":0}";
    assert_int_equal(st_metrics_parse(peer, &junk), ST_RECORD_RUN);
    assert_string_equal(junk.u.run.torch, "2.13.0+cpu");
    assert_string_equal(junk.u.run.backend, "shm");
    assert_string_equal(junk.u.run.mode, "channels_last");
    /* an instance's step times (issue 64) */
    st_record inst = {.type = ST_RECORD_INSTANCE,
                      .u.instance = {.rank = 2, .steps = 200, .step_p50_s = 0.0125, .step_p90_s = 0.015625,
                                     .step_max_s = 0.25, .compute_s = 2.5, .exchange_s = 0.5, .wait_s = 0.375,
                                     .samples_per_s = 1536.5}};
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(st_metrics_write(f, &inst), ST_OK);
    rewind(f);
    char line2[512];
    assert_non_null(fgets(line2, sizeof line2, f));
    fclose(f);
    assert_int_equal(st_metrics_parse(line2, &junk), ST_RECORD_INSTANCE);
    assert_true(junk.u.instance.rank == 2 && junk.u.instance.steps == 200 && junk.u.instance.step_p50_s == 0.0125 &&
                junk.u.instance.step_p90_s == 0.015625 && junk.u.instance.step_max_s == 0.25 &&
                junk.u.instance.compute_s == 2.5 && junk.u.instance.exchange_s == 0.5 &&
                junk.u.instance.wait_s == 0.375 && junk.u.instance.samples_per_s == 1536.5);
    assert_int_equal(st_metrics_parse("not json at all", &junk), ST_RECORD_UNKNOWN);
    assert_int_equal(st_metrics_parse("{\"type\":\"unheard-of\"}", &junk), ST_RECORD_UNKNOWN);
    free(text);
}

/* A language model's records carry its context and tokens/s; an image
 * model's leave them out. */
static void test_language_model_fields(void **state)
{
    (void)state;
    st_record in[4] = {
        {.type = ST_RECORD_RUN, .u.run = {.system = "shmtrain", .instances = 1, .model = "gpt-mini", .context = 64}},
        {.type = ST_RECORD_TRAIN, .u.train = {.step = 10, .samples_per_s = 200, .tokens_per_s = 12800}},
        {.type = ST_RECORD_SUMMARY, .u.summary = {.steps = 10, .samples_per_s = 150, .tokens_per_s = 9600}},
        {.type = ST_RECORD_TRAIN, .u.train = {.step = 20, .samples_per_s = 300}}};
    char *text = capture(write_records, in);
    assert_non_null(strstr(text, "\"first_step\":0,\"context\":64}"));
    assert_non_null(strstr(text, "\"samples_per_s\":200.0,\"tokens_per_s\":12800.0,"));
    assert_non_null(strstr(text, "\"samples_per_s\":150.0,\"tokens_per_s\":9600.0,"));
    assert_null(strstr(strstr(text, "\"step\":20"), "tokens_per_s"));
    st_record out;
    char *lines = strdup(text);
    free(text);
    assert_non_null(lines);
    char *second = strchr(lines, '\n');
    assert_non_null(second);
    *second++ = '\0';
    assert_int_equal(st_metrics_parse(lines, &out), ST_RECORD_RUN);
    assert_int_equal(out.u.run.context, 64);
    assert_int_equal(st_metrics_parse(second, &out), ST_RECORD_TRAIN);
    assert_true(out.u.train.tokens_per_s == 12800);
    free(lines);
}

static void write_one(FILE *f, const void *arg) { st_metrics_write(f, arg); }

/* The low-precision layers are "lowp_layers" since session 36; a record
 * written before says "bf16_layers", and a run folder of then still reads.
 * A record with both keys means the new one. */
static void test_renamed_field_still_read(void **state)
{
    (void)state;
    st_record in = {.type = ST_RECORD_RUN, .u.run = {.system = "shmtrain", .model = "cnn", .layers = 9,
                                                     .lowp_layers = 7}};
    char *text = capture(write_one, &in);
    assert_non_null(strstr(text, "\"layers\":9,\"lowp_layers\":7,"));
    assert_null(strstr(text, "bf16_layers"));
    free(text);
    st_record out;
    assert_int_equal(st_metrics_parse("{\"type\":\"run\",\"layers\":9,\"bf16_layers\":5}", &out), ST_RECORD_RUN);
    assert_int_equal(out.u.run.lowp_layers, 5);
    assert_int_equal(st_metrics_parse("{\"type\":\"run\",\"bf16_layers\":5,\"lowp_layers\":6}", &out),
                     ST_RECORD_RUN);
    assert_int_equal(out.u.run.lowp_layers, 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_writer),
        cmocka_unit_test(test_records_round_trip),
        cmocka_unit_test(test_language_model_fields),
        cmocka_unit_test(test_renamed_field_still_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
