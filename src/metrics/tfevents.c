/* TensorBoard event files (include/shmtrain/tfevents.h).
 *
 * The protocol buffers are written by hand: an Event is field 1 wall_time
 * (double), 2 step (varint), 3 file_version (string) or 5 summary (bytes);
 * a Summary is repeated field 1 Value; a Value is field 1 tag (string) and
 * 2 simple_value (float), the form TensorBoard's scalar plugin takes. */
#define _GNU_SOURCE
#include "shmtrain/tfevents.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct st_tfevents {
    FILE *events, *csv;
    char path[1024];
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

/* A growing protobuf message in a fixed buffer (an event is a few dozen bytes). */
struct pb {
    uint8_t b[512];
    size_t n;
};

static void pb_varint(struct pb *m, uint64_t v)
{
    do {
        m->b[m->n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v && m->n < sizeof m->b);
}

static void pb_bytes(struct pb *m, unsigned field, const void *data, size_t n)
{
    pb_varint(m, field << 3 | 2);
    pb_varint(m, n);
    if (m->n + n <= sizeof m->b) {
        memcpy(m->b + m->n, data, n);
        m->n += n;
    }
}

static void pb_fixed(struct pb *m, unsigned field, const void *le, size_t n)
{
    pb_varint(m, field << 3 | (n == 8 ? 1 : 5));
    if (m->n + n <= sizeof m->b) {
        memcpy(m->b + m->n, le, n);  /* x86 and aarch64 are little-endian, as protobuf's fixed fields */
        m->n += n;
    }
}

static void write_event(st_tfevents *w, const struct pb *event)
{
    if (!w || !w->events)
        return;
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
    e->n = 0;
    pb_fixed(e, 1, &wall_time, 8);
    pb_varint(e, 2 << 3 | 0);
    pb_varint(e, step);
}

void st_tfevents_scalar(st_tfevents *w, const char *tag, uint64_t step, float value, double wall_time)
{
    if (!w)
        return;
    struct pb v = {.n = 0}, summary = {.n = 0}, e;
    pb_bytes(&v, 1, tag, strnlen(tag, 128));
    pb_fixed(&v, 2, &value, 4);
    pb_bytes(&summary, 1, v.b, v.n);
    event_head(&e, wall_time, step);
    pb_bytes(&e, 5, summary.b, summary.n);
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

static st_status open_csv(st_tfevents *w, const char *dir)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/scalars.csv", dir);
    const bool fresh = access(path, F_OK) != 0;
    if (!(w->csv = fopen(path, "a")))
        return st_fail(ST_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    if (fresh && fputs("step,tag,value,wall_time\n", w->csv) < 0)
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return ST_OK;
}

st_status st_tfevents_create(st_tfevents **out, const char *dir)
{
    *out = NULL;
    st_tfevents *w = calloc(1, sizeof *w);
    if (!w)
        return st_fail(ST_ERR_NOMEM, "tensorboard: out of memory");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    const double now = (double)time(NULL);
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%.0f.%s.%d", dir, now, host, (int)getpid());
    st_status st = ST_OK;
    if (!(w->events = fopen(w->path, "wb")))
        st = st_fail(ST_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
    if (st == ST_OK)
        st = open_csv(w, dir);
    if (st != ST_OK) {
        st_tfevents_destroy(w);
        return st;
    }
    struct pb e;
    event_head(&e, now, 0);
    pb_bytes(&e, 3, "brain.Event:2", strlen("brain.Event:2"));
    write_event(w, &e);
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
