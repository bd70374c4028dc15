/* A config file (--config, a run folder's config.txt): every input is read
 * to entries or refused with a line naming the file and line; an accepted
 * one has keys of letters, digits, '-' and '_', and its entries written as
 * config.txt writes them (st_config_quote) read back to themselves. */
#define _GNU_SOURCE
#include <string.h>

#include "fuzz.h"
#include "shmtrain/config_text.h"

static void written_reads_back(const st_config_entry *e, int n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    for (int i = 0; i < n; i++) {
        char *quoted = e[i].value ? st_config_quote(e[i].value) : NULL;
        fprintf(f, quoted ? "%s %s\n" : "%s\n", e[i].key, quoted);
        free(quoted);
    }
    fclose(f);
    st_config_entry *again;
    int m;
    fuzz_assert(st_config_parse(text, len, "again", &again, &m) == ST_OK);
    fuzz_assert(m == n);
    for (int i = 0; i < n; i++) {
        fuzz_assert(!strcmp(again[i].key, e[i].key));
        fuzz_assert(!e[i].value == !again[i].value);
        fuzz_assert(!e[i].value || !strcmp(again[i].value, e[i].value));
    }
    st_config_free(again, m);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_config_entry *e;
    int n;
    if (st_config_parse((const char *)data, size, "fuzz.cfg", &e, &n) != ST_OK) {
        fuzz_assert(!strncmp(st_last_error(), "fuzz.cfg", 8));  /* a refusal names the file */
        return 0;
    }
    for (int i = 0; i < n; i++) {
        fuzz_assert(e[i].key[0] && e[i].key[0] != '-' && e[i].key[0] != '_' && e[i].line >= 1);
        fuzz_assert(strspn(e[i].key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") ==
                    strlen(e[i].key));
        fuzz_assert(i == 0 || e[i].line > e[i - 1].line);
    }
    written_reads_back(e, n);
    st_config_free(e, n);
    return 0;
}
