/* The words shmtrain's getopt reads (src/shmtrain_line.h). */
#define _GNU_SOURCE
#include "shmtrain_line.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmtrain/nn.h"
#include "shmtrain_options.h"
#include "shmtrain_run_dir.h"

/* The words getopt reads: the model's recipe (its `train` line), then
 * --config's file, then the command line's, so each later one overrides
 * the one before.  Kept until exit (o points into them). */
struct words {
    char **v;
    int n, cap;
    char **owned;  /* the words made here, freed at exit */
    int nowned;
};
static struct words line;

static void free_line(void)
{
    for (int i = 0; i < line.nowned; i++)
        free(line.owned[i]);
    free(line.owned);
    free(line.v);
}

static void push(char *word, bool owned)
{
    if (line.n + 2 > line.cap) {
        line.cap = line.cap ? 2 * line.cap : 64;
        if (!(line.v = realloc(line.v, (size_t)line.cap * sizeof *line.v)) ||
            !(line.owned = realloc(line.owned, (size_t)line.cap * sizeof *line.owned)))
            shmtrain_bad("out of memory");
    }
    line.v[line.n++] = word;
    line.v[line.n] = NULL;
    if (owned)
        line.owned[line.nowned++] = word;
}

/* "key value" -> "--key=value", "key" -> "--key". */
static void push_pair(const char *key, size_t key_len, const char *value, size_t value_len)
{
    char *w;
    if (value_len ? asprintf(&w, "--%.*s=%.*s", (int)key_len, key, (int)value_len, value) < 0
                  : asprintf(&w, "--%.*s", (int)key_len, key) < 0)
        shmtrain_bad("out of memory");
    push(w, true);
}

/* A model's recipe: "key value key value ...". */
static void push_recipe(const char *r)
{
    for (const char *p = r; *p;) {
        const size_t key = strcspn(p, " "), value = strcspn(p + key + 1, " ");
        push_pair(p, key, p + key + 1, value);
        p += key + 1 + value;
        p += *p == ' ';
    }
}

/* --config FILE: one "key value" (or "key" for a flag) a line, the flags
 * without their dashes; '#' starts a comment. */
static void push_config(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        shmtrain_bad("--config %s: cannot open: %s", path, strerror(errno));
    char text[4096];
    while (fgets(text, sizeof text, f)) {
        if (!strchr(text, '\n') && !feof(f))
            shmtrain_bad("--config %s: a line longer than %zu bytes", path, sizeof text - 1);
        text[strcspn(text, "#\r\n")] = '\0';
        const char *key = text + strspn(text, " \t");
        const size_t key_len = strcspn(key, " \t");
        if (!key_len)
            continue;
        const char *value = key + key_len + strspn(key + key_len, " \t");
        size_t value_len = strlen(value);
        while (value_len && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
            value_len--;
        if (key_len == 6 && !strncmp(key, "config", 6))
            shmtrain_bad("--config %s: a config does not name another", path);
        push_pair(key, key_len, value, value_len);
    }
    fclose(f);
}

/* The value of the last `--name V` or `--name=V` of argv, or NULL. */
static const char *last_value(int argc, char **argv, const char *name)
{
    const char *v = NULL;
    const size_t n = strlen(name);
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], name) && i + 1 < argc)
            v = argv[++i];
        else if (!strncmp(argv[i], name, n) && argv[i][n] == '=')
            v = argv[i] + n + 1;
    }
    return v;
}

/* A resumed run's folder's config.txt: what it was started with (flags
 * given now override it), or NULL. */
static const char *resumed_config(int argc, char **argv)
{
    static char path[RUN_DIR_PATH_MAX + 16];
    const char *value = NULL;
    bool checkpoint_named = false;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--resume"))
            value = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : "";
        else if (!strncmp(argv[i], "--resume=", 9))
            value = argv[i] + 9;
        checkpoint_named |= !strcmp(argv[i], "--checkpoint") || !strncmp(argv[i], "--checkpoint=", 13);
    }
    const char *dir = run_dir_resumed(value, last_value(argc, argv, "--out"), checkpoint_named);
    if (!dir)
        return NULL;
    snprintf(path, sizeof path, "%s/config.txt", dir);
    return access(path, R_OK) == 0 ? path : NULL;
}

static char *recipe_text;

static void free_recipe_text(void) { free(recipe_text); }

/* Rotates line.v[from..n) so that its last `tail` words come first. */
static void move_to_front(int from, int tail)
{
    for (int k = 0; k < tail; k++) {
        char *w = line.v[line.n - 1];
        memmove(line.v + from + 1, line.v + from, (size_t)(line.n - 1 - from) * sizeof *line.v);
        line.v[from] = w;
    }
}

char **shmtrain_merge_line(int argc, char **argv, const struct option *flags, st_train_options *o, int *n)
{
    atexit(free_line);
    push(argv[0], false);
    const char *config = last_value(argc, argv, "--config");
    if (!config)
        config = resumed_config(argc, argv);
    if (config) {
        push_config(config);
        char where[4200];
        snprintf(where, sizeof where, "--config %s: ", config);
        shmtrain_check_spelling(line.n, line.v, flags, where);
    }
    const char *model = last_value(argc, argv, "--model");
    model = model ? model : last_value(line.n, line.v, "--model");
    st_model *m = NULL;
    if (st_model_load(&m, model ? model : "lenet") != ST_OK)  /* lenet: st_train_defaults' */
        shmtrain_bad("%s", st_last_error());
    const char *r = st_model_recipe(m);
    if (r) {
        const int before = line.n;
        push_recipe(r);
        move_to_front(1, line.n - before);
        if (!(o->model_recipe = recipe_text = strdup(r)))
            shmtrain_bad("out of memory");
        atexit(free_recipe_text);
    }
    st_model_destroy(m);
    for (int i = 1; i < argc; i++)
        push(argv[i], false);
    *n = line.n;
    return line.v;
}

char *shmtrain_effective_config(const struct option *flags)
{
    static const char *const left_out[] = {"out", "overwrite", "resume", "config", "checkpoint", "metrics", "help",
                                           "version", "summary", "quiet", NULL};
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        shmtrain_bad("out of memory");
    for (int i = 1; i < line.n; i++) {
        if (strncmp(line.v[i], "--", 2))
            continue;  /* --resume's word, left out with it */
        const char *w = line.v[i] + 2, *eq = strchr(w, '=');
        const size_t n = eq ? (size_t)(eq - w) : strlen(w);
        const struct option *opt = NULL;
        for (const struct option *t = flags; t->name && !opt; t++)
            opt = strlen(t->name) == n && !strncmp(t->name, w, n) ? t : NULL;
        const char *value = eq ? eq + 1 : opt && opt->has_arg == required_argument ? line.v[++i] : NULL;
        bool skip = !opt;
        for (int k = 0; left_out[k] && !skip; k++)
            skip = !strcmp(left_out[k], opt->name);
        if (!skip)
            fprintf(f, value ? "%s %s\n" : "%s\n", opt->name, value);
    }
    if (fclose(f) != 0)
        shmtrain_bad("out of memory");
    return text;
}

