/* The words shmtrain's getopt reads (src/shmtrain_line.h). */
#define _GNU_SOURCE
#include "shmtrain_line.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "shmtrain/ckpt.h"
#include "shmtrain/config_text.h"
#include "shmtrain/nn.h"
#include "shmtrain_words.h"
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

/* "key value" -> "--key=value", "key" (value NULL) -> "--key". */
static void push_pair(const char *key, size_t key_len, const char *value, size_t value_len)
{
    char *w;
    if (value ? asprintf(&w, "--%.*s=%.*s", (int)key_len, key, (int)value_len, value) < 0
              : asprintf(&w, "--%.*s", (int)key_len, key) < 0)
        shmtrain_bad("out of memory");
    push(w, true);
}

/* A model's recipe: "key value key value ...". */
static void push_recipe(const char *r)
{
    for (const char *p = r; *p;) {
        const size_t key = strcspn(p, " ");
        const char *v = p[key] ? p + key + 1 : p + key;
        const size_t value = strcspn(v, " ");
        push_pair(p, key, value ? v : NULL, value);
        p = v + value;
        p += *p == ' ';
    }
}

/* The option `name` names in `flags`, or NULL. */
static const struct option *flag_named(const struct option *flags, const char *name)
{
    for (const struct option *f = flags; f->name; f++)
        if (!strcmp(f->name, name))
            return f;
    return NULL;
}

/* Settings a file cannot hold: they end the run before it starts, or name
 * another file of settings. */
static bool not_a_setting(const char *key)
{
    static const char *const keys[] = {"help", "version", "summary", "config", NULL};
    for (int i = 0; keys[i]; i++)
        if (!strcmp(key, keys[i]))
            return true;
    return false;
}

static int config_instances;  /* a run's config.txt: its instance count (0: not said) */
int shmtrain_config_instances(void) { return config_instances; }

/* A flag alone in a file: "augment", or "augment true" as other tools'
 * configs write it; "false" leaves it out. */
static bool flag_is_on(const char *where, const st_config_entry *e)
{
    if (!e->value || !strcmp(e->value, "true") || !strcmp(e->value, "yes") || !strcmp(e->value, "1"))
        return true;
    if (!strcmp(e->value, "false") || !strcmp(e->value, "no") || !strcmp(e->value, "0"))
        return false;
    shmtrain_bad("%s:%d: %s takes no value (or true / false), not '%s'", where, e->line, e->key, e->value);
}

/* One entry of --config's file onto the line, checked against the flags. */
static void push_entry(const char *path, const st_config_entry *e, const struct option *flags)
{
    if (!strcmp(e->key, "instances")) {  /* config.txt's record of the run, not a flag */
        config_instances = e->value ? (int)shmtrain_whole("--config instances", e->value, 1, 1 << 20) : 0;
        return;
    }
    char word[300];
    snprintf(word, sizeof word, "--%s", e->key);
    char *argv[] = {"shmtrain", word, NULL}, where[4200];
    snprintf(where, sizeof where, "--config %s:%d: ", path, e->line);
    shmtrain_check_spelling(2, argv, flags, where);  /* unknown or misspelled: did you mean */
    const struct option *f = flag_named(flags, e->key);
    if (not_a_setting(e->key))
        shmtrain_bad("--config %s:%d: %s is no setting (it ends a run before it starts, or names another file)", path,
                     e->line, e->key);
    if (f->has_arg == required_argument && !e->value)
        shmtrain_bad("--config %s:%d: %s needs a value", path, e->line, e->key);
    if (f->has_arg == no_argument)
        if (flag_is_on(where, e))
            push_pair(e->key, strlen(e->key), NULL, 0);
    if (f->has_arg != no_argument)
        push_pair(e->key, strlen(e->key), e->value, e->value ? strlen(e->value) : 0);
}

/* --config FILE: "key value" lines (include/shmtrain/config_text.h), the
 * flags without their dashes; every key checked against the flags. */
static void push_config(const char *path, const struct option *flags)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        shmtrain_bad("--config %s: a folder; give a file (a run's settings are DIR/config.txt)", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        shmtrain_bad("--config %s: cannot open: %s", path, strerror(errno));
    char *text = malloc(ST_CONFIG_MAX_BYTES + 1);
    const size_t n = text ? fread(text, 1, ST_CONFIG_MAX_BYTES + 1, f) : 0;
    const bool failed = !text || ferror(f);
    fclose(f);
    if (failed)
        shmtrain_bad("--config %s: cannot read: %s", path, text ? strerror(errno) : "out of memory");
    st_config_entry *entries;
    int count;
    char name[4200];
    snprintf(name, sizeof name, "--config %s", path);
    const st_status st = st_config_parse(text, n, name, &entries, &count);
    free(text);
    if (st != ST_OK)
        shmtrain_bad("%s", st_last_error());
    for (int i = 0; i < count; i++)
        push_entry(path, &entries[i], flags);
    st_config_free(entries, count);
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

/* --resume's value ("" alone, NULL without it); *checkpoint_named: --checkpoint given. */
static const char *resume_value(int argc, char **argv, bool *checkpoint_named)
{
    const char *value = NULL;
    *checkpoint_named = false;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--resume"))
            value = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : "";
        else if (!strncmp(argv[i], "--resume=", 9))
            value = argv[i] + 9;
        *checkpoint_named |= !strcmp(argv[i], "--checkpoint") || !strncmp(argv[i], "--checkpoint=", 13);
    }
    return value;
}

/* `--resume FILE` of a checkpoint outside a run folder, with no --model:
 * the checkpoint knows its model. */
static const char *resumed_checkpoint(int argc, char **argv)
{
    bool named;
    const char *value = resume_value(argc, argv, &named);
    return value && *value && !run_dir_resumed(value, NULL, named) && st_ckpt_is_checkpoint(value) ? value : NULL;
}

/* A resumed run's folder's config.txt: what it was started with (flags
 * given now override it), or NULL. */
static const char *resumed_config(int argc, char **argv)
{
    static char path[RUN_DIR_PATH_MAX + 16];
    bool checkpoint_named;
    const char *value = resume_value(argc, argv, &checkpoint_named);
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

/* "--name=v" or "--name": is `name` the flag of this word? */
static bool word_is_flag(const char *word, const char *name)
{
    const size_t n = strlen(name);
    return !strncmp(word, "--", 2) && !strncmp(word + 2, name, n) && (word[2 + n] == '=' || !word[2 + n]);
}

/* A flag the command line gives replaces the file's and the recipe's, every
 * occurrence: --text, which may come twice, would otherwise add to them. */
static void drop_overridden(int argc, char **argv, const struct option *flags)
{
    for (const struct option *f = flags; f->name; f++) {
        bool given = false;
        for (int i = 1; i < argc && strcmp(argv[i], "--") && !given; i++)
            given = word_is_flag(argv[i], f->name);
        if (!given)
            continue;
        int kept = 1;
        for (int i = 1; i < line.n; i++)
            if (!word_is_flag(line.v[i], f->name))
                line.v[kept++] = line.v[i];
        line.n = kept;
        line.v[kept] = NULL;
    }
}

char **shmtrain_merge_line(int argc, char **argv, const struct option *flags, st_train_options *o, int *n)
{
    atexit(free_line);
    push(argv[0], false);
    const char *config = last_value(argc, argv, "--config");
    if (!config)
        config = resumed_config(argc, argv);
    if (config)
        push_config(config, flags);
    const char *model = last_value(argc, argv, "--model");
    model = model ? model : last_value(line.n, line.v, "--model");
    if (!model && (model = resumed_checkpoint(argc, argv)))
        push_pair("model", 5, model, strlen(model));
    st_model *m = NULL;
    if (st_train_model_load(&m, model ? model : "lenet") != ST_OK)  /* lenet: st_train_defaults' */
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
    drop_overridden(argc, argv, flags);
    for (int i = 1; i < argc; i++)
        push(argv[i], false);
    *n = line.n;
    return line.v;
}
