/* TensorBoard event files (include/shmtrain/tfevents.h).
 *
 * The protocol buffers are written by hand: an Event is field 1 wall_time
 * (double), 2 step (varint), 3 file_version (string) or 5 summary (bytes);
 * a Summary is repeated field 1 Value; a Value is field 1 tag (string) and
 * 2 simple_value (float), the form TensorBoard's scalar plugin takes. */
#define _GNU_SOURCE
#include "shmtrain/tfevents.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct st_tfevents {
    FILE *events, *csv;
    char path[4352];  /* a run folder's name (at most 4096 bytes) and the file's */
};

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])  /* a race here writes the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    uint32_t crc = 0xFFFFFFFFu;
    while (n--)
        crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

uint32_t st_tfevents_masked_crc(const void *data, size_t n)
{
    const uint32_t crc = crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* A growing protobuf message in a fixed buffer (an event is a few dozen
 * bytes).  A message that would not fit is marked, not cut: write_event
 * drops it whole, so no reader ever sees a truncated record. */
struct pb {
    uint8_t b[512];
    size_t n;
    bool overflow;
};

static void pb_put(struct pb *m, const void *data, size_t n)
{
    if (m->overflow || n > sizeof m->b - m->n) {
        m->overflow = true;
        return;
    }
    memcpy(m->b + m->n, data, n);
    m->n += n;
}

static void pb_varint(struct pb *m, uint64_t v)
{
    uint8_t bytes[10];
    size_t n = 0;
    do {
        bytes[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_put(m, bytes, n);
}

static void pb_bytes(struct pb *m, unsigned field, const void *data, size_t n)
{
    pb_varint(m, field << 3 | 2);
    pb_varint(m, n);
    pb_put(m, data, n);
}

/* A nested message: one cut short makes the whole one cut short. */
static void pb_message(struct pb *m, unsigned field, const struct pb *inner)
{
    m->overflow |= inner->overflow;
    pb_bytes(m, field, inner->b, inner->n);
}

static void pb_fixed(struct pb *m, unsigned field, const void *le, size_t n)
{
    pb_varint(m, field << 3 | (n == 8 ? 1 : 5));
    pb_put(m, le, n);  /* x86 and aarch64 are little-endian, as protobuf's fixed fields */
}

static void write_event(st_tfevents *w, const struct pb *event)
{
    if (!w || !w->events)
        return;
    if (event->overflow) {
        fprintf(stderr, "shmtrain: warning: %s: an event longer than %zu bytes left out\n", w->path,
                sizeof event->b);
        return;
    }
    const uint64_t len = event->n;
    const uint32_t len_crc = st_tfevents_masked_crc(&len, sizeof len), data_crc = st_tfevents_masked_crc(event->b, event->n);
    if (fwrite(&len, sizeof len, 1, w->events) != 1 || fwrite(&len_crc, 4, 1, w->events) != 1 ||
        fwrite(event->b, 1, event->n, w->events) != event->n || fwrite(&data_crc, 4, 1, w->events) != 1 ||
        fflush(w->events) != 0) {
        fprintf(stderr, "shmtrain: warning: %s: %s; no more TensorBoard events\n", w->path, strerror(errno));
        fclose(w->events);
        w->events = NULL;
    }
}

static void event_head(struct pb *e, double wall_time, uint64_t step)
{
    *e = (struct pb){.n = 0};
    pb_fixed(e, 1, &wall_time, 8);
    pb_varint(e, 2 << 3 | 0);
    pb_varint(e, step);
}

void st_tfevents_scalar(st_tfevents *w, const char *tag, uint64_t step, float value, double wall_time)
{
    if (!w)
        return;
    struct pb v = {.n = 0}, summary = {.n = 0}, e = {.n = 0};
    pb_bytes(&v, 1, tag, strnlen(tag, 128));
    pb_fixed(&v, 2, &value, 4);
    pb_message(&summary, 1, &v);
    event_head(&e, wall_time, step);
    pb_message(&e, 5, &summary);
    write_event(w, &e);
    if (w->csv && (fprintf(w->csv, "%llu,%s,%.9g,%.3f\n", (unsigned long long)step, tag, value, wall_time) < 0 ||
                   fflush(w->csv) != 0)) {
        fprintf(stderr, "shmtrain: warning: scalars.csv beside %s: %s; no more CSV rows\n", w->path, strerror(errno));
        fclose(w->csv);
        w->csv = NULL;
    }
}

/* The time shares of a train record's interval, as the console prints them. */
static void time_shares(st_tfevents *w, const st_train_record *t, double wall_time)
{
    const double busy = t->compute_s + t->allreduce_s + t->data_s;
    if (busy <= 0)
        return;
    st_tfevents_scalar(w, "time_share/compute", t->step, (float)(t->compute_s / busy), wall_time);
    st_tfevents_scalar(w, "time_share/allreduce", t->step, (float)((t->allreduce_s - t->wait_s) / busy), wall_time);
    st_tfevents_scalar(w, "time_share/wait", t->step, (float)(t->wait_s / busy), wall_time);
    if (t->data_s > 0)
        st_tfevents_scalar(w, "time_share/data", t->step, (float)(t->data_s / busy), wall_time);
}

void st_tfevents_record(st_tfevents *w, const st_record *r, double wall_time)
{
    if (!w)
        return;
    if (r->type == ST_RECORD_TRAIN) {
        const st_train_record *t = &r->u.train;
        st_tfevents_scalar(w, "train/loss", t->step, (float)t->loss, wall_time);
        st_tfevents_scalar(w, "train/accuracy", t->step, (float)t->accuracy, wall_time);
        st_tfevents_scalar(w, "train/lr", t->step, (float)t->lr, wall_time);
        st_tfevents_scalar(w, "train/samples_per_s", t->step, (float)t->samples_per_s, wall_time);
        if (t->tokens_per_s > 0)
            st_tfevents_scalar(w, "train/tokens_per_s", t->step, (float)t->tokens_per_s, wall_time);
        time_shares(w, t, wall_time);
    } else if (r->type == ST_RECORD_EVAL) {
        st_tfevents_scalar(w, "eval/loss", r->u.eval.step, (float)r->u.eval.test_loss, wall_time);
        st_tfevents_scalar(w, "eval/accuracy", r->u.eval.step, (float)r->u.eval.test_accuracy, wall_time);
    }
}

static st_status open_csv(st_tfevents *w, const char *dir, uint64_t resumed_at)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/scalars.csv", dir);
    st_status st = resumed_at ? st_metrics_drop_after(path, resumed_at, true) : ST_OK;
    if (st != ST_OK)
        return st;
    const bool fresh = access(path, F_OK) != 0;
    if (!(w->csv = fopen(path, "a")))
        return st_fail(ST_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    if (fresh && (fputs("step,tag,value,wall_time\n", w->csv) < 0 || fflush(w->csv) != 0))
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return ST_OK;
}

/* TensorBoard's answer to a resumed run (PyTorch's SummaryWriter(purge_step=)
 * writes the same): a SessionLog START at the first step after the
 * checkpoint makes its reader drop every scalar from that step on that an
 * earlier event file holds, the steps a crashed run logged past its last
 * checkpoint. */
static void write_restart(st_tfevents *w, double wall_time, uint64_t step)
{
    struct pb session = {.n = 0}, e;
    pb_varint(&session, 1 << 3 | 0);  /* SessionLog.status */
    pb_varint(&session, 1);           /* START */
    event_head(&e, wall_time, step);
    pb_message(&e, 7, &session);      /* Event.session_log */
    write_event(w, &e);
}

/* The time in the event file's name: TensorBoard reads a folder's files in
 * the order of their names, so a resumed run's must come after every
 * earlier one's, even one written in the same second (whose name would
 * then be ordered by the digits of a pid). */
static double name_stamp(const char *dir, double now)
{
    DIR *d = opendir(dir);
    if (!d)
        return now;
    static const char prefix[] = "events.out.tfevents.";
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, sizeof prefix - 1))
            continue;
        const double t = strtod(e->d_name + sizeof prefix - 1, NULL);
        if (t >= now)
            now = t + 1;
    }
    closedir(d);
    return now;
}

st_status st_tfevents_create(st_tfevents **out, const char *dir, uint64_t resumed_at)
{
    *out = NULL;
    st_tfevents *w = calloc(1, sizeof *w);
    if (!w)
        return st_fail(ST_ERR_NOMEM, "tensorboard: out of memory");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    const double now = (double)time(NULL);
    const double stamp = name_stamp(dir, now);
    st_status st = ST_OK;
    if ((size_t)snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%.0f.%s.%d", dir, stamp, host,
                         (int)getpid()) >= sizeof w->path)
        st = st_fail(ST_ERR_INVALID, "%s: the folder's name is too long for its event file", dir);
    else if (!(w->events = fopen(w->path, "wb")))
        st = st_fail(ST_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
    if (st == ST_OK)
        st = open_csv(w, dir, resumed_at);
    if (st != ST_OK) {
        st_tfevents_destroy(w);
        return st;
    }
    struct pb e;
    event_head(&e, now, 0);
    pb_bytes(&e, 3, "brain.Event:2", strlen("brain.Event:2"));
    write_event(w, &e);
    if (resumed_at)
        write_restart(w, now, resumed_at + 1);
    *out = w;
    return ST_OK;
}

void st_tfevents_destroy(st_tfevents *w)
{
    if (!w)
        return;
    if (w->events)
        fclose(w->events);
    if (w->csv)
        fclose(w->csv);
    free(w);
}
