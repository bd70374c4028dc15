/* TensorBoard's event files, written without TensorFlow: scalars as the
 * Event protocol buffers TensorBoard reads, framed as TFRecords (length,
 * masked CRC-32C of it, data, masked CRC-32C of that), and the same scalars
 * as CSV beside them for spreadsheets.  `tensorboard --logdir runs/` then
 * shows every run side by side.  Implemented in src/metrics/tfevents.c. */
#ifndef SHMTRAIN_TFEVENTS_H
#define SHMTRAIN_TFEVENTS_H

#include <stdint.h>

#include "shmtrain/metrics.h"
#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_tfevents st_tfevents;

/* Opens DIR/events.out.tfevents.<unix time>.<host>.<pid> (its first record
 * the file version TensorBoard checks) and DIR/scalars.csv, appended to
 * when it exists.  A run resumed from a checkpoint at step `resumed_at`
 * (0: a new run) drops scalars.csv's rows after it and tells TensorBoard to
 * drop the steps after it from the earlier event files (a SessionLog START),
 * so that each step is seen once. */
st_status st_tfevents_create(st_tfevents **out, const char *dir, uint64_t resumed_at);

/* One scalar at `step`, `wall_time` in seconds since the epoch.  A failed
 * write turns the writer off (said once on stderr): losing a plot must not
 * stop training. */
void st_tfevents_scalar(st_tfevents *w, const char *tag, uint64_t step, float value, double wall_time);

/* A metrics record's scalars (train/..., eval/...; run and summary records
 * carry none). */
void st_tfevents_record(st_tfevents *w, const st_record *r, double wall_time);

void st_tfevents_destroy(st_tfevents *w);

/* CRC-32C (Castagnoli), as TFRecords mask it; for the tests. */
uint32_t st_tfevents_masked_crc(const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
