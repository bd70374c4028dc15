/* Model text: parsing it line by line and loading it (each layer line's
 * grammar is in model_lines.c, the parser's helpers in model_parser.c, the
 * presets in model_presets.c, the accessors and the summary in
 * model_info.c: each calls only the ones after it). */
#define _GNU_SOURCE
#include "model_parser.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static st_status parse_save(struct parser *ps, char **tok, int ntok)
{
    if (ntok != 2 || strlen(tok[1]) >= sizeof ps->names[0])
        return parser_error(ps, "save: needs one name of at most %d characters (save b0)", NAME_LEN - 1);
    if (parser_find_name(ps, tok[1]) >= 0)
        return parser_error(ps, "save: name '%s' is already used", tok[1]);
    if (ps->nnames == ps->names_cap) {
        const int cap = ps->names_cap ? 2 * ps->names_cap : 16;
        char(*names)[NAME_LEN] = realloc(ps->names, (size_t)cap * sizeof *names);
        if (names)
            ps->names = names;
        int *node = realloc(ps->name_node, (size_t)cap * sizeof *node);
        if (node)
            ps->name_node = node;
        if (!names || !node)
            return st_fail(ST_ERR_NOMEM, "model: out of memory");
        ps->names_cap = cap;
    }
    snprintf(ps->names[ps->nnames], sizeof ps->names[0], "%s", tok[1]);
    ps->name_node[ps->nnames++] = ps->m->n - 1;
    return parser_emit(ps, "save %s", tok[1]);
}


/* Is `word` one of the space-separated `words`? */
static bool one_of(const char *words, const char *word)
{
    const size_t n = strlen(word);
    for (const char *w = words; *w; w += strcspn(w, " "), w += *w == ' ')
        if (strcspn(w, " ") == n && !strncmp(w, word, n))
            return true;
    return false;
}

/* "train KEY VALUE ...": the training defaults a model carries (its recipe),
 * each KEY a shmtrain flag without its dashes; flags given to shmtrain
 * override them.  Words are checked here, ranges by shmtrain as for its
 * flags.  Not part of the canonical text: a checkpoint's model is its
 * architecture. */
static st_status parse_train(struct parser *ps, char **tok, int ntok)
{
    static const struct {
        const char *key, *words;  /* words: the values allowed, or NULL for a number */
    } keys[] = {{"optimizer", "sgd adamw"}, {"lr", NULL},        {"momentum", NULL},  {"weight-decay", NULL},
                {"beta2", NULL},             {"clip-norm", NULL}, {"schedule", "constant step cosine"},
                {"warmup", NULL},            {"min-lr", NULL},    {"step-size", NULL}, {"gamma", NULL},
                {"batch-size", NULL}};
    if (ps->m->recipe)
        return parser_error(ps, "train: a model has one train line");
    if (ntok < 3 || ntok % 2 == 0)
        return parser_error(ps, "train: expected KEY VALUE pairs (train optimizer adamw lr 1e-3 batch-size 12)");
    size_t len = 0;
    for (int i = 1; i < ntok; i += 2) {
        size_t k = 0;
        while (k < sizeof keys / sizeof *keys && strcmp(keys[k].key, tok[i]))
            k++;
        if (k == sizeof keys / sizeof *keys)
            return parser_error(ps, "train: unknown key '%s' (known: optimizer lr momentum weight-decay beta2 "
                                    "clip-norm schedule warmup min-lr step-size gamma batch-size)", tok[i]);
        char *end;
        const bool ok = keys[k].words ? one_of(keys[k].words, tok[i + 1])
                                      : (strtod(tok[i + 1], &end), *tok[i + 1] && !*end);
        if (!ok)
            return parser_error(ps, "train: %s '%s': expected %s", tok[i], tok[i + 1],
                                keys[k].words ? keys[k].words : "a number");
        len += strlen(tok[i]) + strlen(tok[i + 1]) + 2;
    }
    if (!(ps->m->recipe = malloc(len + 1)))
        return st_fail(ST_ERR_NOMEM, "model: out of memory");
    size_t at = 0;
    for (int i = 1; i < ntok; i += 2)
        at += (size_t)sprintf(ps->m->recipe + at, "%s%s %s", i > 1 ? " " : "", tok[i], tok[i + 1]);
    return ST_OK;
}

static st_status parse_line(struct parser *ps, char *line);  /* a block parses its parts through it */

/* block heads H: one pre-norm transformer block (GPT-2's), as its parts. */
static st_status parse_block(struct parser *ps, char **tok, int ntok)
{
    int heads;
    if (ntok != 3 || strcmp(tok[1], "heads") || !parser_int(tok[2], 0, &heads) || heads < 1)
        return parser_error(ps, "block: expected 'block heads H'");
    const struct node *src = parser_last(ps);
    if (src->t < 1)
        return parser_error(ps, "block: needs a [T, C] sequence input (after embed)");
    const int c = src->c, id = ps->nnames;
    char lines[12][48];
    snprintf(lines[0], sizeof lines[0], "save _b%d_attn", id);
    snprintf(lines[1], sizeof lines[1], "layernorm");
    snprintf(lines[2], sizeof lines[2], "linear %d", 3 * c);
    snprintf(lines[3], sizeof lines[3], "attention heads %d", heads);
    snprintf(lines[4], sizeof lines[4], "linear %d", c);
    snprintf(lines[5], sizeof lines[5], "add _b%d_attn", id);
    snprintf(lines[6], sizeof lines[6], "save _b%d_mlp", id);
    snprintf(lines[7], sizeof lines[7], "layernorm");
    snprintf(lines[8], sizeof lines[8], "linear %d", 4 * c);
    snprintf(lines[9], sizeof lines[9], "gelu");
    snprintf(lines[10], sizeof lines[10], "linear %d", c);
    snprintf(lines[11], sizeof lines[11], "add _b%d_mlp", id);
    for (int i = 0; i < 12; i++) {
        st_status st = parse_line(ps, lines[i]);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

static st_status parse_line(struct parser *ps, char *line)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *tok[MAX_TOKENS + 1], *save = NULL;
    int ntok = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (ntok == MAX_TOKENS)
            return parser_error(ps, "too many arguments");
        tok[ntok++] = t;
    }
    if (ntok == 0)
        return ST_OK;
    if (!strcmp(tok[0], "train"))
        return parse_train(ps, tok, ntok);
    if (!strcmp(tok[0], "save"))
        return ps->m->n == 0 ? parser_error(ps, "the first layer must be 'input C H W', not 'save'")
                             : parse_save(ps, tok, ntok);
    if (!strcmp(tok[0], "block"))
        return ps->m->n == 0 ? parser_error(ps, "the first layer must be 'input ...', not 'block'")
                             : parse_block(ps, tok, ntok);
    if (ps->m->n > 0 && parser_last(ps)->tokens && strcmp(tok[0], "embed"))
        return parser_error(ps, "%s: token ids must go through 'embed VOCAB DIM' first", tok[0]);
    static const struct {
        const char *keyword;
        st_status (*parse)(struct parser *ps, char **tok, int ntok, node_kind kind);
    } kinds[] = {
#define PARSER(KIND, keyword, parse, ...) [NODE_##KIND] = {keyword, parse},
        NN_LAYER_TABLE(PARSER)
#undef PARSER
    };
    _Static_assert(sizeof kinds / sizeof *kinds == NODE_KINDS, "a parser per layer kind");
    for (int k = 0; k < NODE_KINDS; k++) {
        if (strcmp(tok[0], kinds[k].keyword) != 0)
            continue;
        if (ps->m->n == 0 && k != NODE_INPUT)
            return parser_error(ps, "the first layer must be 'input C H W', not '%s'", tok[0]);
        return kinds[k].parse(ps, tok, ntok, (node_kind)k);
    }
    char known[256] = "";
    size_t len = 0;
    for (int k = 0; k < NODE_KINDS; k++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s ", kinds[k].keyword);
    return parser_error(ps, "unknown layer '%s' (known: %ssave block)", tok[0], known);
}

/* One sample's output of the node, bounded like every tensor (before any
 * size is formed from it). */
static st_status check_activation(const struct parser *ps, const struct node *nd)
{
    size_t elems;
    const bool rows = nd->t > 0 && !nd->tokens;
    return parser_elements(ps, node_kind_name(nd->kind), rows ? (size_t)nd->t : (size_t)nd->c,
                           rows ? (size_t)nd->c : (size_t)nd->h, rows ? 1 : (size_t)nd->w, &elems);
}

/* The layers still describe their output as c, h, w (or c, flat); the
 * shape every size is computed from is set from that once per node. */
static void set_shape(struct node *nd)
{
    nd->dtype = nd->tokens ? ST_DTYPE_I32 : ST_DTYPE_F32;
    if (nd->tokens)
        nd->shape = (st_shape){1, {nd->t}};
    else if (nd->t > 0)
        nd->shape = (st_shape){2, {nd->t, nd->c}};
    else
        nd->shape = nd->flat ? (st_shape){1, {nd->c}} : (st_shape){3, {nd->c, nd->h, nd->w}};
}

st_status st_model_parse(st_model **out, const char *text, const char *source)
{
    *out = NULL;
    struct parser ps = {.source = source ? source : "model"};
    ps.m = calloc(1, sizeof *ps.m);
    char *copy = strdup(text ? text : "");
    st_status st = ST_OK;
    if (!ps.m || !copy) {
        st = st_fail(ST_ERR_NOMEM, "model: out of memory");
        goto out;
    }
    char *save = NULL;
    ps.line = 0;
    for (char *p = copy, *nl; p && st == ST_OK; p = nl) {
        nl = strchr(p, '\n');
        if (nl)
            *nl++ = '\0';
        ps.line++;
        int before = ps.m ? ps.m->n : 0;
        st = parse_line(&ps, p);
        for (int k = before; st == ST_OK && k < ps.m->n; k++)
            if ((st = check_activation(&ps, &ps.m->nodes[k])) == ST_OK)
                set_shape(&ps.m->nodes[k]);
    }
    (void)save;
    if (st == ST_OK && ps.m->n == 0)
        st = st_fail(ST_ERR_FORMAT, "%s: empty model: expected 'input C H W' and layers", ps.source);
    else if (st == ST_OK && ps.m->n == 1)
        st = st_fail(ST_ERR_FORMAT, "%s: the model has an input but no layers", ps.source);
out:
    free(copy);
    free(ps.names);
    free(ps.name_node);
    if (st != ST_OK) {
        free(ps.text);
        st_model_destroy(ps.m);
        return st;
    }
    ps.m->text = ps.text;
    *out = ps.m;
    return ST_OK;
}

/* A model file is text: a NUL would end the parse early without a word
 * (the layers after it silently dropped), so any control byte but
 * white space is an error naming where it sits. */
static st_status check_text(const char *text, size_t len, const char *path)
{
    int line = 1, column = 1;
    for (size_t i = 0; i < len; i++, column++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            line++;
            column = 0;
        } else if ((c < 0x20 && c != '\t' && c != '\r' && c != '\f' && c != '\v') || c == 0x7f) {
            return st_fail(ST_ERR_FORMAT, "--model %s: line %d, column %d: binary content (byte 0x%02x); a model "
                                          "file is text", path, line, column, c);
        }
    }
    return ST_OK;
}

st_status st_model_load(st_model **out, const char *name_or_path)
{
    const char *preset = st_model_preset_text(name_or_path);
    if (preset)
        return st_model_parse(out, preset, name_or_path);
    FILE *f = fopen(name_or_path, "r");
    if (!f)
        return st_fail(ST_ERR_IO, "--model %s: not a preset (%s) and not a "
                                  "readable file: %s", name_or_path, nn_preset_names(), strerror(errno));
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    char buf[4096];
    size_t n;
    while (mem && (n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, mem);
    bool bad = ferror(f);
    fclose(f);
    if (mem)
        fclose(mem);
    if (!mem || bad || !text) {
        free(text);
        return st_fail(ST_ERR_IO, "--model %s: read failed", name_or_path);
    }
    st_status st = check_text(text, len, name_or_path);
    if (st == ST_OK)
        st = st_model_parse(out, text, name_or_path);
    free(text);
    return st;
}

void st_model_destroy(st_model *m)
{
    if (!m)
        return;
    free(m->nodes);
    free(m->text);
    free(m->recipe);
    free(m);
}
