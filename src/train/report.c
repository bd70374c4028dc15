/* What the trainer tells: progress lines, metrics records (the run, each
 * interval, each evaluation, the summary), and the evaluation itself
 * (trainer.h; the loop that calls them is train.c). */
#define _GNU_SOURCE
#include <limits.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "trainer.h"

/* What a language model's token is: a character of its alphabet, or an id
 * of another tokenizer (token files: GPT-2's BPE, ...). */
static const char *token_unit(const struct trainer *t)
{
    return t->text && st_text_alphabet_len(t->text) ? "character" : "token";
}
#include "shmtrain/env.h"
#include "shmtrain/metrics.h"

static const double THRESHOLDS[NTHRESH] = {0.80, 0.85, 0.88, 0.89, 0.90, 0.91, 0.92};
_Static_assert(NTHRESH <= ST_METRICS_MAX_TARGETS, "the summary record holds every threshold");


/* ------------------------------------------------------------ output -- */

/* A record the disk would not take ends the records, not the run: said now
 * and at the end (the run's exit status), the file left whole up to it. */
void train_record(struct trainer *t, const st_record *r)
{
    if (t->metrics && st_metrics_write(t->metrics, r) != ST_OK) {
        snprintf(t->records_why, sizeof t->records_why, "%s holds no records after step %llu (%s)",
                 t->o->metrics ? t->o->metrics : "metrics.jsonl", (unsigned long long)t->step, st_last_error());
        fprintf(stderr, "shmtrain: warning: %s; training goes on\n", t->records_why);
        fclose(t->metrics);
        t->metrics = NULL;
        t->records_lost = true;
    }
    if (t->tb) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        st_tfevents_record(t->tb, r, (double)now.tv_sec + 1e-9 * (double)now.tv_nsec);
    }
}

/* Language models count tokens: a window is `context` of them. */
static double rate_per_sample(const struct trainer *t) { return t->text ? t->context : 1; }
static const char *rate_unit(const struct trainer *t) { return t->text ? "tokens/s" : "samples/s"; }

double train_page_faults(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_minflt + (double)u.ru_majflt : 0;
}

void train_log_interval(struct trainer *t, float lr)
{
    const double now = st_now_s(), span = now - t->interval_start;
    const double samples = (double)t->interval_steps * t->global_batch;
    const double loss = t->loss_sum / t->interval_steps, acc = t->correct_sum / t->interval_steps;
    const double sps = span > 0 ? samples / span : 0;
    const long max = t->steps_total;
    const long epochs = t->epochs_total == LONG_MAX ? (max + t->steps_per_epoch - 1) / t->steps_per_epoch
                                                    : t->epochs_total;  /* --max-steps alone: what it spans */
    const double eta = sps > 0 ? (double)(max - (long)t->step) * t->global_batch / sps : 0;
    const double frac = t->epoch + (double)t->epoch_pos / ((double)t->steps_per_epoch * t->global_batch);
    train_record(t, &(st_record){.type = ST_RECORD_TRAIN,
                           .u.train = {.step = t->step, .epoch = frac, .loss = loss, .accuracy = acc, .lr = lr,
                                       .samples_per_s = sps, .tokens_per_s = t->text ? sps * t->context : 0, .time_s = now - t->start + t->elapsed_before,
                                       .compute_s = t->t_compute - t->t_data, .allreduce_s = t->t_reduce,
                                       .wait_s = t->t_wait, .data_s = t->t_data, .faults_said = true,
                                       .page_faults = (train_page_faults() - t->faults_at) / t->interval_steps}});
    if (t->tty) {
        int width = 24, done = max > 0 ? (int)(width * (double)t->step / max) : 0;
        char bar[32];
        for (int i = 0; i < width; i++)
            bar[i] = i < done ? '=' : i == done ? '>' : ' ';
        bar[width] = '\0';
        train_say(t, "epoch %llu/%ld [%s] step %llu/%ld loss %.4f acc %5.1f%% %8.0f %s ETA %d:%02d",
            (unsigned long long)t->epoch + 1, epochs, bar, (unsigned long long)t->step, max, loss,
            100 * acc, sps * rate_per_sample(t), rate_unit(t), (int)eta / 60, (int)eta % 60);
    } else {
        char data[32] = "";  /* streamed images: waiting for their decoding is not compute */
        if (t->stream[0])
            snprintf(data, sizeof data, ", data %.0f%%", 100 * t->t_data / span);
        train_say(t, "epoch %llu step %llu/%ld loss %.4f acc %.1f%% lr %.4g %.0f %s (compute %.0f%%, "
               "all-reduce %.0f%%, wait %.0f%%%s) ETA %d:%02d\n",
            (unsigned long long)t->epoch + 1, (unsigned long long)t->step, max, loss, 100 * acc, lr,
            sps * rate_per_sample(t), rate_unit(t),
            100 * (t->t_compute - t->t_data) / span, 100 * (t->t_reduce - t->t_wait) / span, 100 * t->t_wait / span,
            data, (int)eta / 60, (int)eta % 60);
    }
    t->t_compute = t->t_reduce = t->t_wait = t->t_data = t->loss_sum = t->correct_sum = 0;
    t->interval_steps = 0;
    t->interval_start = st_now_s();
    t->faults_at = train_page_faults();
}

/* ---------------------------------------------------------- evaluation -- */

static st_status evaluate(struct trainer *t, double *acc_out, double *loss_out, unsigned long long *predictions)
{
    const int b = t->o->batch, positions = st_model_positions(t->model);
    const size_t n = train_eval_samples(t), global = (size_t)t->world * b;
    float sums[3] = {0, 0, 0};  /* loss, correct, count */
    st_status st = ST_OK;
    st_net_set_training(t->net, false);
    for (size_t first = 0; first < n && st == ST_OK; first += global) {
        int valid, correct;
        double loss_sum;
        if ((st = train_fill_eval_batch(t, first, &valid)) != ST_OK)
            break;
        comm_heartbeat(&t->comm);  /* no collective until the end: tell the launcher we progress */
        if ((st = st_net_forward(t->net, t->x)) != ST_OK ||
            (st = st_net_score(t->net, t->y, valid * positions, &loss_sum, &correct)) != ST_OK)
            break;
        sums[0] += (float)loss_sum;
        sums[1] += (float)correct;
        sums[2] += (float)(valid * positions);
    }
    st_net_set_training(t->net, true);
    if (st == ST_OK)
        st = comm_allreduce(&t->comm, sums, 3, ST_DTYPE_F32, ST_SUM);
    if (st == ST_OK) {
        *acc_out = sums[2] > 0 ? sums[1] / sums[2] : 0;
        *loss_out = sums[2] > 0 ? sums[0] / sums[2] : 0;
        *predictions = (unsigned long long)sums[2];  /* exact in float up to 2^24 */
    }
    return st;
}

st_status train_eval_and_report(struct trainer *t)
{
    double acc, loss;
    unsigned long long predictions = 0;
    const double t0 = st_now_s(), faults0 = train_page_faults();
    st_status st = evaluate(t, &acc, &loss, &predictions);
    if (st != ST_OK)
        return st;
    const double at = st_now_s() - t->start + t->elapsed_before;
    t->last_eval_step = (long)t->step;
    t->last_acc = acc;
    t->last_loss = loss;
    if (acc > t->best_acc)
        t->best_acc = acc;
    for (size_t i = 0; i < NTHRESH; i++)
        if (acc >= THRESHOLDS[i] && t->reached_at[i] < 0) {
            t->reached_at[i] = at;
            t->reached_step[i] = (long)t->step;
        }
    train_record(t, &(st_record){.type = ST_RECORD_EVAL,
                           .u.eval = {.step = t->step, .epoch = t->epoch, .test_loss = loss, .test_accuracy = acc,
                                      .time_s = at, .eval_s = st_now_s() - t0, .predictions = predictions}});
    const char *unit = token_unit(t);
    if (t->text)
        train_say(t, "eval  step %llu: validation loss %.4f (%.3f bits per %s), next-%s accuracy %.2f%% "
               "(%zu windows)\n", (unsigned long long)t->step, loss, loss / log(2.0), unit, unit, 100 * acc,
               t->eval_count);
    else
        train_say(t, "eval  epoch %llu step %llu: test loss %.4f, test accuracy %.2f%% (best %.2f%%)\n",
            (unsigned long long)t->epoch + (t->epoch_pos ? 1 : 0), (unsigned long long)t->step, loss, 100 * acc,
            100 * t->best_acc);
    train_keep_best(t, acc, loss);
    t->interval_start += st_now_s() - t0;  /* evaluation is not training time */
    t->faults_at += train_page_faults() - faults0;  /* nor are its faults a step's */
    return ST_OK;
}

/* ------------------------------------------------------------- metrics -- */

/* A resumed run (or a restarted gang) goes on from its checkpoint's step:
 * what the records hold after it was logged by the run that crashed, and
 * goes, so each step is told once. */
void train_open_metrics(struct trainer *t)
{
    if (t->rank != 0)
        return;
    char path[4200];
    const char *dir = st_env_text(ST_ENV_LOG_DIR);
    if (t->o->metrics)
        snprintf(path, sizeof path, "%s", t->o->metrics);
    else
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir ? dir : ".");
    if (t->step && st_metrics_drop_after(path, t->step, false) != ST_OK)
        fprintf(stderr, "shmtrain: warning: %s (steps after %llu may appear twice)\n", st_last_error(),
                (unsigned long long)t->step);
    t->metrics = fopen(path, t->step ? "a" : "w");
    if (!t->metrics)
        fprintf(stderr, "shmtrain: --metrics %s: cannot open: %s (continuing without)\n", path, strerror(errno));
    if (t->o->events_dir && st_tfevents_create(&t->tb, t->o->events_dir, t->step) != ST_OK)
        fprintf(stderr, "shmtrain: warning: %s (no TensorBoard events)\n", st_last_error());
}

void train_recipe(const st_train_options *o, char *buf, size_t len)
{
    static const char *const schedules[] = {"constant", "step", "cosine"};
    const st_optim_config *c = &o->optim;
    size_t at = (size_t)snprintf(buf, len, "%s lr %g", c->kind == ST_OPTIM_ADAMW ? "adamw" : "sgd", o->schedule.lr);
    if (c->kind == ST_OPTIM_SGD && c->momentum > 0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, " momentum %g%s", c->momentum, c->nesterov ? " nesterov" : "");
    if (at < len)
        at += (size_t)snprintf(buf + at, len - at, " %s", schedules[o->schedule.kind]);
    if (o->schedule.kind == ST_SCHED_COSINE && at < len)
        at += (size_t)snprintf(buf + at, len - at, " to %g", o->schedule.min_lr);
    if (o->schedule.warmup && at < len)
        at += (size_t)snprintf(buf + at, len - at, " warm-up %llu", (unsigned long long)o->schedule.warmup);
    if (c->weight_decay > 0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, " weight-decay %g", c->weight_decay);
    if (c->kind == ST_OPTIM_ADAMW && c->beta2 > 0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, " beta2 %g", c->beta2);
    if (o->clip_norm > 0 && at < len)
        snprintf(buf + at, len - at, " clip-norm %g", o->clip_norm);
}

/* What ran, so a report can say what it compares (shmrun --sweep reads it). */
void train_run_record(struct trainer *t)
{
    st_record r = {.type = ST_RECORD_RUN,
                   .u.run = {.system = "shmtrain", .instances = t->world, .threads = omp_get_max_threads(),
                             .params = (long long)t->P, .batch_per_instance = t->o->batch, .first_step = t->step,
                             .grad_accum = t->accum_steps > 1 ? t->accum_steps : 0,
                             .context = t->text ? t->context : 0}};
    snprintf(r.u.run.model, sizeof r.u.run.model, "%s", t->o->model);
    train_recipe(t->o, r.u.run.recipe, sizeof r.u.run.recipe);
    st_nn_onednn_version(r.u.run.onednn, sizeof r.u.run.onednn);
    snprintf(r.u.run.isa, sizeof r.u.run.isa, "%s", st_nn_onednn_isa());
    snprintf(r.u.run.launcher, sizeof r.u.run.launcher, "%s", t->comm.launcher);
    snprintf(r.u.run.allreduce_dtype, sizeof r.u.run.allreduce_dtype, "%s", st_dtype_name(t->o->allreduce_dtype));
    snprintf(r.u.run.balance, sizeof r.u.run.balance, "%s", t->independent ? "independent" : t->bal.dynamic ? "dynamic"
                                                                                                       : "static");
    /* what was built, not what was asked: a bf16 net may keep layers in fp32 */
    r.u.run.layers = st_net_layers(t->net);
    r.u.run.lowp_layers = st_net_lowp_layers(t->net);
    snprintf(r.u.run.kernels, sizeof r.u.run.kernels, "%s", t->tuned.chose);
    snprintf(r.u.run.precision, sizeof r.u.run.precision, "%s",
             st_dtype_name(r.u.run.lowp_layers > 0 ? t->o->precision : ST_DTYPE_F32));
    train_record(t, &r);
}

/* This process's peak resident memory so far, MiB (Linux counts KiB). */
static double peak_rss_mb(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss / 1024.0 : 0;
}

/* Each instance's row: steps, p50, p90, max, compute, exchange, wait, and
 * its own samples/s after the first log interval. */
enum { INSTANCE_FIELDS = 8 };

static void instance_records(struct trainer *t, const float *all)
{
    int slowest = 0, waits_most = 0;
    double worst_compute = -1, most_wait = -1;
    for (int k = 0; k < t->world; k++) {
        const float *f = all + (size_t)k * INSTANCE_FIELDS;
        st_record rec = {.type = ST_RECORD_INSTANCE,
                         .u.instance = {.rank = k, .steps = (long)f[0], .step_p50_s = f[1], .step_p90_s = f[2],
                                        .step_max_s = f[3], .compute_s = f[4], .exchange_s = f[5], .wait_s = f[6],
                                        .samples_per_s = f[7]}};
        train_record(t, &rec);
        const double steps = f[0] > 0 ? f[0] : 1, compute = f[4] / steps, wait = f[6] / steps;
        if (compute > worst_compute)
            worst_compute = compute, slowest = k;
        if (wait > most_wait)
            most_wait = wait, waits_most = k;
    }
    const float *s = all + (size_t)slowest * INSTANCE_FIELDS, *w = all + (size_t)waits_most * INSTANCE_FIELDS;
    if (t->world > 1 && s[0] > 0 && w[0] > 0)
        train_say(t, "      instances: rank %d computes slowest (%.1f ms a step; its steps p50 %.1f, p90 %.1f, max "
                  "%.1f ms), rank %d waits most (%.1f ms a step, %.0f%% of its steps)\n", slowest, 1e3 * s[4] / s[0],
                  1e3 * s[1], 1e3 * s[2], 1e3 * s[3], waits_most, 1e3 * w[6] / w[0],
                  100.0 * w[6] / (w[4] + w[5] > 0 ? w[4] + w[5] : 1));
}

st_status train_instances(struct trainer *t)
{
    const size_t n = (size_t)t->world * INSTANCE_FIELDS;
    float *all = calloc(n, sizeof *all);
    if (!all)
        return st_fail(ST_ERR_NOMEM, "train: out of memory for %d instances' step times", t->world);
    const struct step_times *s = &t->times;
    float *mine = all + (size_t)t->rank * INSTANCE_FIELDS;
    mine[0] = (float)s->steps;
    mine[1] = (float)step_times_quantile(s, 0.5);
    mine[2] = (float)step_times_quantile(s, 0.9);
    mine[3] = (float)s->max_s;
    mine[4] = (float)s->compute_s;
    mine[5] = (float)s->exchange_s;
    mine[6] = (float)s->wait_s;
    mine[7] = (float)step_times_steady_rate(s, (double)t->global_batch / t->world);
    /* every row zero but its owner's: the sum is the gathered table */
    st_status st = comm_allreduce(&t->comm, all, n, ST_DTYPE_F32, ST_SUM);
    for (int k = 0; st == ST_OK && k < t->world; k++)
        t->instances_sps += all[(size_t)k * INSTANCE_FIELDS + 7];
    if (st == ST_OK && t->rank == 0)
        instance_records(t, all);
    free(all);
    return st;
}

void train_summary(struct trainer *t, st_train_result *r)
{
    const double total = st_now_s() - t->start + t->elapsed_before;
    /* independent instances wait for no one: the machine's speed is the sum of theirs */
    const double sps = t->train_seconds <= 0 ? 0 : t->independent ? t->instances_sps : r->samples_per_s;
    if (t->text)
        train_say(t, "done: %ld steps in %.1f s (%.0f tokens/s training), final validation loss %.4f (%.3f bits per "
               "%s)\n", r->steps, total, sps * t->context, t->last_loss, t->last_loss / log(2.0), token_unit(t));
    else
        train_say(t, "done: %ld steps in %.1f s (%.0f samples/s training), final test accuracy %.2f%%, best %.2f%%\n",
            r->steps, total, sps, 100 * t->last_acc, 100 * t->best_acc);
    st_record rec = {.type = ST_RECORD_SUMMARY,
                     .u.summary = {.steps = r->steps, .instances = t->world, .batch_per_instance = t->o->batch,
                                   .total_s = total, .train_s = t->train_seconds, .samples_per_s = sps,
                                   .tokens_per_s = t->text ? sps * t->context : 0,
                                   .final_test_accuracy = t->last_acc, .best_test_accuracy = t->best_acc,
                                   .peak_rss_mb = peak_rss_mb(), .micro_batches = t->taken_all,
                                   .micro_batches_here = t->bal.taken, .allreduces_said = true,
                                   .samples_decoded = t->stream[0] ? st_stream_decoded(t->stream[0]) : 0,
                                   .step_allreduces = t->step_allreduces}};
    for (size_t i = 0; i < NTHRESH; i++)
        if (t->reached_at[i] >= 0) {
            train_say(t, "      reached %.0f%% test accuracy after %.1f s (step %ld)\n", 100 * THRESHOLDS[i],
                t->reached_at[i], t->reached_step[i]);
            st_summary_record *s = &rec.u.summary;
            s->reached_accuracy[s->nreached] = THRESHOLDS[i];
            s->reached_s[s->nreached++] = t->reached_at[i];
        }
    if (t->replica_checks)
        train_say(t, "      --check-replicas: all %d instances held identical parameters at each of %ld checks\n",
                  t->world, t->replica_checks);
    if (t->bal.dynamic && t->taken_all > 0)
        train_say(t, "      --balance dynamic: %llu micro-batches, each computed once; this instance computed "
                  "%llu (%.0f%% of an even share)\n", (unsigned long long)t->taken_all,
                  (unsigned long long)t->bal.taken, 100.0 * (double)t->bal.taken * t->world / (double)t->taken_all);
    if (rec.u.summary.peak_rss_mb > 0)
        train_say(t, "      peak memory: %.0f MiB resident in this instance\n", rec.u.summary.peak_rss_mb);
    if (t->saved)
        train_say(t, "      checkpoint: %s (step %ld)\n", t->o->checkpoint, r->steps);
    train_record(t, &rec);
}
