/* Config text (include/shmtrain/config_text.h): what each line reads as,
 * what is refused with its line, and that config.txt's quoting reads back
 * (issue 62: a value holding '#' trained on another file; a binary file
 * said "a line longer than 4095 bytes"; a key alone took the next word). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shmtrain/config_text.h"

struct want {
    const char *key, *value;  /* value NULL: a key alone */
    int line;
};

static void expect_entries(const char *text, size_t n, const struct want *want, int count)
{
    st_config_entry *e;
    int got;
    if (st_config_parse(text, n, "t.cfg", &e, &got) != ST_OK)
        fail_msg("refused: %s", st_last_error());
    assert_int_equal(got, count);
    for (int i = 0; i < count; i++) {
        assert_string_equal(e[i].key, want[i].key);
        if (want[i].value)
            assert_string_equal(e[i].value, want[i].value);
        else
            assert_null(e[i].value);
        assert_int_equal(e[i].line, want[i].line);
    }
    st_config_free(e, got);
}

static void expect_refusal(const char *text, size_t n, const char *message)
{
    st_config_entry *e;
    int got;
    assert_int_equal(st_config_parse(text, n, "t.cfg", &e, &got), ST_ERR_FORMAT);
    if (!strstr(st_last_error(), message))
        fail_msg("'%s', wanted '%s'", st_last_error(), message);
    assert_null(e);
}

#define TEXT(literal) literal, sizeof(literal) - 1

static void test_lines(void **state)
{
    (void)state;
    const struct want w[] = {{"model", "gpt-mini", 2}, {"lr", "0.001", 3}, {"text", "a#1.txt", 4},
                             {"augment", NULL, 5},     {"out", "", 6},    {"data", "my folder", 7},
                             {"seed", "3", 9}};
    expect_entries(TEXT("# a comment\nmodel gpt-mini   # said after a blank: a comment\n  lr=0.001\n"
                        "text a#1.txt\naugment\nout=\ndata my folder\n\n--seed = 3\n"), w, 7);
}

static void test_quotes_and_escapes(void **state)
{
    (void)state;
    const struct want w[] = {{"text", " a #1 \"q\" \\ \n\t\rA", 1}, {"b", "", 2}};
    expect_entries(TEXT("text \" a #1 \\\"q\\\" \\\\ \\n\\t\\r\\x41\"  # comment\nb \"\"\n"), w, 2);
}

static void test_bom_and_crlf(void **state)
{
    (void)state;
    const struct want w[] = {{"model", "mlp", 1}, {"max-steps", "1", 2}};
    expect_entries(TEXT("\xef\xbb\xbfmodel mlp\r\nmax-steps 1\r\n"), w, 2);
}

static void test_refusals_name_the_line(void **state)
{
    (void)state;
    expect_refusal(TEXT("model mlp\n\0lr 1\n"), "t.cfg:2: byte 0x00: not a text file");
    expect_refusal(TEXT("model mlp\nlr 1\x01\n"), "t.cfg:2: byte 0x01: not a text file");
    expect_refusal(TEXT("model mlp\n\nx.y 3\n"), "t.cfg:3: 'x.y' is not a setting's name");
    expect_refusal(TEXT("----- 3\n"), "t.cfg:1: '-----' is not a setting's name");
    expect_refusal(TEXT("text \"open\n"), "t.cfg:1: a quoted value without its closing quote");
    expect_refusal(TEXT("text \"a\" b\n"), "t.cfg:1: text after a quoted value");
    expect_refusal(TEXT("text \"\\q\"\n"), "t.cfg:1: an escape other than");
    expect_refusal(TEXT("text \"\\x00\"\n"), "t.cfg:1: \\x00 in a value");
    char *big = calloc(ST_CONFIG_MAX_BYTES + 2, 1);
    assert_non_null(big);
    memset(big, 'a', ST_CONFIG_MAX_BYTES + 1);
    expect_refusal(big, ST_CONFIG_MAX_BYTES + 1, "a config is at most");
    free(big);
}

/* config.txt writes each value so that it reads back as itself. */
static void test_quoting_reads_back(void **state)
{
    (void)state;
    static const char *const values[] = {"plain", "a#1.txt", "a #1", " lead", "trail ", "=x", "\"q", "back\\slash",
                                         "tab\there", "new\nline", "\x7f", "", "0.05", "/opt/x y"};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        char *quoted = st_config_quote(values[i]), text[256];
        assert_non_null(quoted);
        snprintf(text, sizeof text, "text %s\n", quoted);
        if (!strcmp(values[i], "plain") || !strcmp(values[i], "0.05"))
            assert_string_equal(quoted, values[i]);  /* bare where nothing in it could be misread */
        free(quoted);
        const struct want w[] = {{"text", values[i], 1}};
        expect_entries(text, strlen(text), w, 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_quotes_and_escapes),
        cmocka_unit_test(test_bom_and_crlf),
        cmocka_unit_test(test_refusals_name_the_line),
        cmocka_unit_test(test_quoting_reads_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
