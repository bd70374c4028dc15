/* Checkpoint file format (little-endian):
 *   "SHMTCKPT" u32 version u32 0 u64 payload_bytes
 *   payload: sections of (u32 tag, u64 bytes, bytes)
 *   u32 crc32(payload) "END!"
 */
#define _GNU_SOURCE
#include "shmtrain/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define MAGIC "SHMTCKPT"
#define VERSION 1u
#define TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
enum { T_MODEL = TAG('M', 'O', 'D', 'L'), T_PARAMS = TAG('P', 'A', 'R', 'M'), T_BUFFERS = TAG('B', 'U', 'F', 'S'),
       T_OPTIM = TAG('O', 'P', 'T', 'S'), T_STATE = TAG('S', 'T', 'A', 'T'),
       T_VOCAB = TAG('V', 'O', 'C', 'B') /* optional: a language model's alphabet */,
       T_BEST = TAG('K', 'B', 'S', 'T') /* optional: the score --keep-best's file holds */ };

struct state_section {
    uint64_t epoch, epoch_pos, step, seed, optim_steps;
    uint32_t world_size, optim_kind;
    double best_accuracy, elapsed_s;
};

struct out {
    FILE *f;
    uLong crc;
    bool failed;
};

static void put(struct out *o, const void *p, size_t n, bool in_crc)
{
    if (n && fwrite(p, 1, n, o->f) != n)
        o->failed = true;
    if (in_crc && n)
        o->crc = crc32(o->crc, p, (uInt)n);
}

static void section(struct out *o, uint32_t tag, const void *p, size_t n)
{
    uint64_t len = n;
    put(o, &tag, 4, true);
    put(o, &len, 8, true);
    put(o, p, n, true);
}

static uint64_t payload_size(const st_ckpt *c)
{
    return 5 * 12 + strlen(c->model_text) + (c->nparams + c->nbuffers + c->noptim) * sizeof(float) +
           sizeof(struct state_section) + (c->nalphabet ? 12 + c->nalphabet : 0) +
           (c->has_kept_best ? 12 + sizeof c->kept_best : 0);
}

/* A writer killed between fopen and rename leaves PATH.tmp.PID behind.
 * Remove those of this checkpoint whose writer is gone; a live writer's
 * (another process checkpointing to the same file) is left alone. */
static void remove_stale_temporaries(const char *path)
{
    char dir[4096], base[4096];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(base, sizeof base, "%s", path);
    const char *d = dirname(dir), *b = basename(base);
    char prefix[4200];
    int plen = snprintf(prefix, sizeof prefix, "%s.tmp.", b);
    DIR *dh = opendir(d);
    if (!dh)
        return;
    for (struct dirent *e; (e = readdir(dh)) != NULL;) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        char *end;
        errno = 0;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (errno || end == e->d_name + plen || *end || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;  /* alive, or not ours to judge */
        unlinkat(dirfd(dh), e->d_name, 0);
    }
    closedir(dh);
}

/* The write in progress, for st_ckpt_abandon_write, which another thread
 * calls as the process leaves: under the lock, a temporary is created only
 * while no abandonment has been asked for and renamed into place only
 * before one, so none outlives the process (a leaver that looked just
 * before the writer created its file would otherwise leave it behind). */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static char writing_path[4096];
static bool writing, abandoned;

void st_ckpt_abandon_write(void)
{
    pthread_mutex_lock(&write_lock);
    abandoned = true;
    if (writing)
        unlink(writing_path);
    pthread_mutex_unlock(&write_lock);
}

static FILE *create_unless_abandoned(const char *tmp)
{
    pthread_mutex_lock(&write_lock);
    FILE *f = NULL;
    if (abandoned)
        errno = ECANCELED;
    else if ((f = fopen(tmp, "wb")) != NULL) {
        snprintf(writing_path, sizeof writing_path, "%s", tmp);
        writing = true;
    }
    const int err = errno;
    pthread_mutex_unlock(&write_lock);
    errno = err;
    return f;
}

static int rename_unless_abandoned(const char *tmp, const char *path)
{
    pthread_mutex_lock(&write_lock);
    int r = -1;
    if (abandoned)
        errno = ECANCELED;
    else
        r = rename(tmp, path);
    const int err = errno;
    pthread_mutex_unlock(&write_lock);
    errno = err;
    return r;
}

static st_status write_file(const char *path, const char *tmp, const st_ckpt *c);

st_status st_ckpt_write(const char *path, const st_ckpt *c)
{
    remove_stale_temporaries(path);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    const st_status st = write_file(path, tmp, c);
    pthread_mutex_lock(&write_lock);
    writing = false;
    pthread_mutex_unlock(&write_lock);
    return st;
}

static st_status write_file(const char *path, const char *tmp, const st_ckpt *c)
{
    struct out o = {.f = create_unless_abandoned(tmp), .crc = crc32(0, NULL, 0)};
    if (!o.f)
        return st_fail(ST_ERR_IO, "checkpoint %s: cannot create %s: %s", path, tmp, strerror(errno));
    uint32_t version = VERSION, zero = 0;
    uint64_t bytes = payload_size(c);
    struct state_section s = {c->epoch, c->epoch_pos, c->step, c->seed, c->optim_steps, c->world_size,
                              c->optim_kind, c->best_accuracy, c->elapsed_s};
    put(&o, MAGIC, 8, false);
    put(&o, &version, 4, false);
    put(&o, &zero, 4, false);
    put(&o, &bytes, 8, false);
    section(&o, T_MODEL, c->model_text, strlen(c->model_text));
    section(&o, T_PARAMS, c->params, c->nparams * sizeof(float));
    section(&o, T_BUFFERS, c->buffers, c->nbuffers * sizeof(float));
    section(&o, T_OPTIM, c->optim_state, c->noptim * sizeof(float));
    section(&o, T_STATE, &s, sizeof s);
    if (c->nalphabet)
        section(&o, T_VOCAB, c->alphabet, c->nalphabet);
    if (c->has_kept_best)
        section(&o, T_BEST, &c->kept_best, sizeof c->kept_best);
    uint32_t crc = (uint32_t)o.crc;
    put(&o, &crc, 4, false);
    put(&o, "END!", 4, false);
    int saved = errno;
    bool ok = !o.failed && fflush(o.f) == 0 && fsync(fileno(o.f)) == 0;
    saved = ok ? 0 : errno ? errno : saved;
    if (fclose(o.f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        return st_fail(ST_ERR_IO, "checkpoint %s: writing failed (%s); %s", path, strerror(saved),
                       access(path, F_OK) == 0 ? "the previous checkpoint is kept" : "there is none before it");
    }
    if (rename_unless_abandoned(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        return st_fail(ST_ERR_IO, "checkpoint %s: rename failed: %s", path, strerror(saved));
    }
    /* The rename itself must reach the disk too. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return ST_OK;
}

static st_status take_floats(const char *path, const char *what, const uint8_t *p, uint64_t n, float **out,
                             size_t *count)
{
    if (n % sizeof(float))
        return st_fail(ST_ERR_FORMAT, "checkpoint %s: %s section has %llu bytes", path, what,
                       (unsigned long long)n);
    *count = n / sizeof(float);
    *out = malloc(n ? n : 1);
    if (!*out)
        return st_fail(ST_ERR_NOMEM, "checkpoint %s: out of memory", path);
    memcpy(*out, p, n);
    return ST_OK;
}

static const char *section_name(uint32_t tag)
{
    switch (tag) {
    case T_MODEL: return "model text";
    case T_PARAMS: return "parameters";
    case T_BUFFERS: return "buffers";
    case T_OPTIM: return "optimizer";
    case T_STATE: return "training state";
    case T_BEST: return "kept best";
    default: return "vocabulary";
    }
}

static st_status take_section(const char *path, uint32_t tag, const uint8_t *p, uint64_t n, st_ckpt *c)
{
    switch (tag) {
    case T_MODEL:
        if (memchr(p, '\0', n))
            return st_fail(ST_ERR_FORMAT, "checkpoint %s: the model text holds a NUL byte", path);
        if (!(c->model_text = strndup((const char *)p, n)))
            return st_fail(ST_ERR_NOMEM, "checkpoint %s: out of memory", path);
        return ST_OK;
    case T_PARAMS: return take_floats(path, "parameters", p, n, &c->params, &c->nparams);
    case T_BUFFERS: return take_floats(path, "buffers", p, n, &c->buffers, &c->nbuffers);
    case T_OPTIM: return take_floats(path, "optimizer", p, n, &c->optim_state, &c->noptim);
    case T_VOCAB:
        if (n < 1 || n > 256)
            return st_fail(ST_ERR_FORMAT, "checkpoint %s: vocabulary section of %llu bytes (1 to 256)", path,
                           (unsigned long long)n);
        if (!(c->alphabet = malloc(n)))
            return st_fail(ST_ERR_NOMEM, "checkpoint %s: out of memory", path);
        memcpy(c->alphabet, p, n);
        c->nalphabet = (uint32_t)n;
        return ST_OK;
    case T_BEST:
        if (n != sizeof c->kept_best)
            return st_fail(ST_ERR_FORMAT, "checkpoint %s: kept-best section of %llu bytes, not %zu", path,
                           (unsigned long long)n, sizeof c->kept_best);
        memcpy(&c->kept_best, p, n);
        c->has_kept_best = true;
        return ST_OK;
    default: {
        struct state_section s;
        if (n != sizeof s)
            return st_fail(ST_ERR_FORMAT, "checkpoint %s: training state section of %llu bytes, not %zu", path,
                           (unsigned long long)n, sizeof s);
        memcpy(&s, p, sizeof s);
        c->epoch = s.epoch, c->epoch_pos = s.epoch_pos, c->step = s.step, c->seed = s.seed;
        c->optim_steps = s.optim_steps, c->world_size = s.world_size, c->optim_kind = s.optim_kind;
        c->best_accuracy = s.best_accuracy, c->elapsed_s = s.elapsed_s;
        return ST_OK;
    }
    }
}

static st_status parse_sections(const char *path, const uint8_t *p, uint64_t len, st_ckpt *c)
{
    static const uint32_t tags[] = {T_MODEL, T_PARAMS, T_BUFFERS, T_OPTIM, T_STATE, T_VOCAB, T_BEST};
    enum { REQUIRED = 5 };  /* all but the vocabulary and the kept best */
    bool have[sizeof tags / sizeof *tags] = {0};
    while (len >= 12) {
        uint32_t tag;
        uint64_t n;
        memcpy(&tag, p, 4);
        memcpy(&n, p + 4, 8);
        p += 12;
        len -= 12;
        if (n > len)
            return st_fail(ST_ERR_FORMAT, "checkpoint %s: a section runs past the end", path);
        size_t k = 0;
        while (k < sizeof tags / sizeof *tags && tags[k] != tag)
            k++;
        if (k < sizeof tags / sizeof *tags) {  /* other tags: a later version's, skipped */
            if (have[k])
                return st_fail(ST_ERR_FORMAT, "checkpoint %s: the %s section appears twice", path, section_name(tag));
            have[k] = true;
            st_status st = take_section(path, tag, p, n, c);
            if (st != ST_OK)
                return st;
        }
        p += n;
        len -= n;
    }
    if (len)
        return st_fail(ST_ERR_FORMAT, "checkpoint %s: %llu bytes after the last section", path,
                       (unsigned long long)len);
    for (int i = 0; i < REQUIRED; i++)
        if (!have[i])
            return st_fail(ST_ERR_FORMAT, "checkpoint %s: the %s section is missing", path, section_name(tags[i]));
    return ST_OK;
}

static bool alphabet_has_repeats(const uint8_t *a, uint32_t n)
{
    bool seen[256] = {0};
    for (uint32_t i = 0; i < n; i++) {
        if (seen[a[i]])
            return true;
        seen[a[i]] = true;
    }
    return false;
}

st_status st_ckpt_check(const st_ckpt *c, const char *path, const st_ckpt_expect *e)
{
    if (e->model_text && strcmp(c->model_text, e->model_text) != 0)
        return st_fail(ST_ERR_MISMATCH, "checkpoint %s was written for another model (use the same --model)", path);
    if (c->nparams != e->nparams)
        return st_fail(ST_ERR_MISMATCH, "checkpoint %s: %zu parameters, the model has %zu", path, c->nparams,
                       e->nparams);
    if (c->nbuffers != e->nbuffers)
        return st_fail(ST_ERR_MISMATCH, "checkpoint %s: %zu buffer values (batch-norm statistics), the model has %zu",
                       path, c->nbuffers, e->nbuffers);
    if (e->optim && (c->optim_kind != e->optim_kind || c->noptim != e->noptim))
        return st_fail(ST_ERR_MISMATCH, "checkpoint %s was written with another --optimizer (or momentum)", path);
    if (!e->vocab && c->nalphabet)
        return st_fail(ST_ERR_MISMATCH, "checkpoint %s holds a vocabulary: a language model's, not this model's",
                       path);
    if (c->nalphabet > (uint32_t)e->vocab)
        return st_fail(ST_ERR_MISMATCH, "checkpoint %s: its vocabulary has %u symbols, the model's embedding %d",
                       path, c->nalphabet, e->vocab);
    if (alphabet_has_repeats(c->alphabet, c->nalphabet))
        return st_fail(ST_ERR_FORMAT, "checkpoint %s: its vocabulary names a byte twice", path);
    return ST_OK;
}

bool st_ckpt_is_checkpoint(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[8];
    const bool is = f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, MAGIC, 8);
    if (f)
        fclose(f);
    return is;
}

/* The first section, the model's text (write_file's order), without the
 * rest: the whole file is checked when it is resumed from. */
st_status st_ckpt_read_model_text(const char *path, char **text)
{
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_fail(ST_ERR_IO, "checkpoint %s: cannot open: %s", path, strerror(errno));
    uint8_t head[24 + 12];
    uint32_t tag;
    uint64_t n;
    st_status st = ST_OK;
    if (fread(head, 1, sizeof head, f) != sizeof head || memcmp(head, MAGIC, 8) != 0)
        st = st_fail(ST_ERR_FORMAT, "checkpoint %s: not a shmtrain checkpoint (bad magic or truncated)", path);
    memcpy(&tag, head + 24, 4);
    memcpy(&n, head + 28, 8);
    if (st == ST_OK && (tag != T_MODEL || n > (16u << 20)))
        st = st_fail(ST_ERR_FORMAT, "checkpoint %s: no model text where it belongs", path);
    if (st == ST_OK && !(*text = calloc(1, n + 1)))
        st = st_fail(ST_ERR_NOMEM, "checkpoint %s: out of memory", path);
    if (st == ST_OK && (fread(*text, 1, n, f) != n || memchr(*text, '\0', n)))
        st = st_fail(ST_ERR_FORMAT, "checkpoint %s: its model text is cut short or holds a NUL byte", path);
    fclose(f);
    if (st != ST_OK) {
        free(*text);
        *text = NULL;
    }
    return st;
}

st_status st_ckpt_read(const char *path, st_ckpt *c)
{
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_fail(ST_ERR_IO, "checkpoint %s: cannot open: %s", path, strerror(errno));
    uint8_t head[24], *payload = NULL;
    st_status st = ST_OK;
    if (fread(head, 1, 24, f) != 24 || memcmp(head, MAGIC, 8) != 0) {
        st = st_fail(ST_ERR_FORMAT, "checkpoint %s: not a shmtrain checkpoint (bad magic or truncated)", path);
        goto out;
    }
    uint32_t version;
    uint64_t len;
    memcpy(&version, head + 8, 4);
    memcpy(&len, head + 16, 8);
    if (version != VERSION) {
        st = st_fail(ST_ERR_FORMAT, "checkpoint %s: version %u, this build reads version %u", path, version,
                     VERSION);
        goto out;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (size < 0 || (uint64_t)size != 24 + len + 8) {
        st = st_fail(ST_ERR_FORMAT, "checkpoint %s: truncated or padded (%ld bytes, header says %llu)", path, size,
                     (unsigned long long)(24 + len + 8));
        goto out;
    }
    fseek(f, 24, SEEK_SET);
    uint8_t trailer[8];
    if (!(payload = malloc(len ? len : 1)) || fread(payload, 1, len, f) != len || fread(trailer, 1, 8, f) != 8) {
        st = st_fail(ST_ERR_IO, "checkpoint %s: read failed", path);
        goto out;
    }
    uint32_t crc;
    memcpy(&crc, trailer, 4);
    if (memcmp(trailer + 4, "END!", 4) != 0 || crc != (uint32_t)crc32(crc32(0, NULL, 0), payload, (uInt)len)) {
        st = st_fail(ST_ERR_FORMAT, "checkpoint %s: checksum mismatch: the file is corrupt", path);
        goto out;
    }
    st = parse_sections(path, payload, len, c);
out:
    free(payload);
    fclose(f);
    if (st != ST_OK)
        st_ckpt_free(c);
    return st;
}

void st_ckpt_free(st_ckpt *c)
{
    free(c->alphabet);
    free(c->model_text);
    free(c->params);
    free(c->buffers);
    free(c->optim_state);
    memset(c, 0, sizeof *c);
}
