/* The data-parallel training loop, evaluation, metrics, progress and
 * checkpoints.  The only module that sees nn, data, coll and ckpt at once. */
#define _GNU_SOURCE
#include "shmtrain/train.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainer.h"
#include "shmtrain/bf16.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/coll.h"
#include "shmtrain/data.h"
#include "shmtrain/env.h"
#include "shmtrain/metrics.h"
#include "shmtrain/shmname.h"
#include "shmtrain/nn.h"


static atomic_bool stop_requested;  /* set by main's signal thread */
void st_train_request_stop(void) { atomic_store(&stop_requested, true); }

static const double THRESHOLDS[NTHRESH] = {0.80, 0.85, 0.88, 0.89, 0.90, 0.91, 0.92};
_Static_assert(NTHRESH <= ST_METRICS_MAX_TARGETS, "the summary record holds every threshold");

void st_train_defaults(st_train_options *o)
{
    memset(o, 0, sizeof *o);
    o->model = "lenet";
    o->data_dir = "/usr/share/datasets/fashion-mnist";
    o->epochs = 1;
    o->batch = 64;
    o->schedule = (st_schedule){.kind = ST_SCHED_CONSTANT, .lr = 0.05f};
    o->optim = (st_optim_config){.kind = ST_OPTIM_SGD, .momentum = 0.9f};
    o->seed = 1;
    o->log_every = 50;
    o->checkpoint = "shmtrain.ckpt";
    o->flush_denormals = true;
    o->eval_windows = 256;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ output -- */

static void record(struct trainer *t, const st_record *r)
{
    if (t->metrics)
        st_metrics_write(t->metrics, r);
}

static void say(const struct trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct trainer *t, const char *fmt, ...)
{
    if (t->rank != 0 || t->o->quiet)
        return;
    if (t->tty)
        fputs("\r\033[K", stdout);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* Language models count tokens: a window is `context` of them. */
static double rate_per_sample(const struct trainer *t) { return t->text ? t->context : 1; }
static const char *rate_unit(const struct trainer *t) { return t->text ? "tokens/s" : "samples/s"; }

static void log_interval(struct trainer *t, float lr)
{
    const double now = now_s(), span = now - t->interval_start;
    const double samples = (double)t->interval_steps * t->global_batch;
    const double loss = t->loss_sum / t->interval_steps, acc = t->correct_sum / t->interval_steps;
    const double sps = span > 0 ? samples / span : 0;
    const long total = t->steps_per_epoch * t->o->epochs;
    const long max = t->o->max_steps && t->o->max_steps < total ? t->o->max_steps : total;
    const double eta = sps > 0 ? (double)(max - (long)t->step) * t->global_batch / sps : 0;
    const double frac = t->epoch + (double)t->epoch_pos / ((double)t->steps_per_epoch * t->global_batch);
    record(t, &(st_record){.type = ST_RECORD_TRAIN,
                           .u.train = {.step = t->step, .epoch = frac, .loss = loss, .accuracy = acc, .lr = lr,
                                       .samples_per_s = sps, .tokens_per_s = t->text ? sps * t->context : 0, .time_s = now - t->start + t->elapsed_before,
                                       .compute_s = t->t_compute, .allreduce_s = t->t_reduce, .wait_s = t->t_wait}});
    if (t->tty) {
        int width = 24, done = max > 0 ? (int)(width * (double)t->step / max) : 0;
        char bar[32];
        for (int i = 0; i < width; i++)
            bar[i] = i < done ? '=' : i == done ? '>' : ' ';
        bar[width] = '\0';
        say(t, "epoch %llu/%d [%s] step %llu/%ld loss %.4f acc %5.1f%% %8.0f %s ETA %d:%02d",
            (unsigned long long)t->epoch + 1, t->o->epochs, bar, (unsigned long long)t->step, max, loss,
            100 * acc, sps * rate_per_sample(t), rate_unit(t), (int)eta / 60, (int)eta % 60);
    } else {
        say(t, "epoch %llu step %llu/%ld loss %.4f acc %.1f%% lr %.4g %.0f %s (compute %.0f%%, "
               "all-reduce %.0f%%, wait %.0f%%) ETA %d:%02d\n",
            (unsigned long long)t->epoch + 1, (unsigned long long)t->step, max, loss, 100 * acc, lr,
            sps * rate_per_sample(t), rate_unit(t),
            100 * t->t_compute / span, 100 * (t->t_reduce - t->t_wait) / span, 100 * t->t_wait / span,
            (int)eta / 60, (int)eta % 60);
    }
    t->t_compute = t->t_reduce = t->t_wait = t->loss_sum = t->correct_sum = 0;
    t->interval_steps = 0;
    t->interval_start = now_s();
}

/* ---------------------------------------------------------- evaluation -- */

static st_status evaluate(struct trainer *t, double *acc_out, double *loss_out)
{
    const int b = t->o->batch, k = st_model_classes(t->model), positions = st_model_positions(t->model);
    const size_t n = train_eval_samples(t), global = (size_t)t->world * b;
    float *logits = malloc((size_t)b * positions * k * sizeof(float));
    float sums[3] = {0, 0, 0};  /* loss, correct, count */
    st_status st = logits ? ST_OK : st_fail(ST_ERR_NOMEM, "eval: out of memory");
    st_net_set_training(t->net, false);
    for (size_t first = 0; first < n && st == ST_OK; first += global) {
        int valid;
        train_fill_eval_batch(t, first, &valid);
        st_group_heartbeat(t->comm.local);  /* no collective until the end: tell the launcher we progress */
        if ((st = st_net_forward(t->net, t->x)) != ST_OK)
            break;
        st_net_output(t->net, logits);
        for (int i = 0; i < valid * positions; i++) {
            const float *z = logits + (size_t)i * k;
            int best = 0;
            double zmax = z[0], sum = 0;
            for (int j = 1; j < k; j++)
                if (z[j] > z[best])
                    best = j;
            zmax = z[best];
            for (int j = 0; j < k; j++)
                sum += exp(z[j] - zmax);
            sums[0] += (float)(zmax + log(sum) - z[t->y[i]]);
            sums[1] += best == t->y[i];
            sums[2] += 1;
        }
    }
    st_net_set_training(t->net, true);
    free(logits);
    if (st == ST_OK)
        st = comm_allreduce(&t->comm, sums, 3, ST_SUM);
    if (st == ST_OK) {
        *acc_out = sums[2] > 0 ? sums[1] / sums[2] : 0;
        *loss_out = sums[2] > 0 ? sums[0] / sums[2] : 0;
    }
    return st;
}

static st_status eval_and_report(struct trainer *t)
{
    double acc, loss;
    double t0 = now_s();
    st_status st = evaluate(t, &acc, &loss);
    if (st != ST_OK)
        return st;
    const double at = now_s() - t->start + t->elapsed_before;
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
    record(t, &(st_record){.type = ST_RECORD_EVAL,
                           .u.eval = {.step = t->step, .epoch = t->epoch, .test_loss = loss, .test_accuracy = acc,
                                      .time_s = at, .eval_s = now_s() - t0}});
    if (t->text)
        say(t, "eval  step %llu: validation loss %.4f (%.3f bits per character), next-character accuracy %.2f%% "
               "(%zu windows)\n", (unsigned long long)t->step, loss, loss / log(2.0), 100 * acc, t->eval_count);
    else
        say(t, "eval  epoch %llu step %llu: test loss %.4f, test accuracy %.2f%% (best %.2f%%)\n",
            (unsigned long long)t->epoch + (t->epoch_pos ? 1 : 0), (unsigned long long)t->step, loss, 100 * acc,
            100 * t->best_acc);
    t->interval_start += now_s() - t0;  /* evaluation is not training time */
    return ST_OK;
}

/* --------------------------------------------------------- checkpoints -- */

static st_status save(struct trainer *t)
{
    if (t->rank != 0)
        return ST_OK;
    size_t nb, no;
    st_ckpt c = {.model_text = (char *)st_model_text(t->model),
                 .params = st_net_params(t->net, &c.nparams),
                 .buffers = st_net_buffers(t->net, &nb),
                 .optim_state = st_optim_state(t->opt, &no),
                 .optim_kind = (uint32_t)t->o->optim.kind,
                 .optim_steps = st_optim_steps(t->opt),
                 .epoch = t->epoch, .epoch_pos = t->epoch_pos, .step = t->step, .seed = t->o->seed,
                 .world_size = (uint32_t)t->world, .best_accuracy = t->best_acc,
                 .elapsed_s = now_s() - t->start + t->elapsed_before,
                 .alphabet = t->text ? (uint8_t *)st_text_alphabet(t->text) : NULL,
                 .nalphabet = t->text ? (uint32_t)st_text_vocab(t->text) : 0};
    c.nbuffers = nb;
    c.noptim = no;
    return st_ckpt_write(t->o->checkpoint, &c);
}

static st_status restore(struct trainer *t, const char *path)
{
    st_ckpt c;
    st_status st = st_ckpt_read(path, &c);
    if (st != ST_OK)
        return st;
    size_t P, B, S;
    float *p = st_net_params(t->net, &P), *b = st_net_buffers(t->net, &B), *s = st_optim_state(t->opt, &S);
    if (strcmp(c.model_text, st_model_text(t->model)) != 0)
        st = st_fail(ST_ERR_MISMATCH, "checkpoint %s was written for another model (use the same --model)", path);
    else if (c.nparams != P || c.nbuffers != B)
        st = st_fail(ST_ERR_MISMATCH, "checkpoint %s: %zu parameters, the model has %zu", path, c.nparams, P);
    else if (c.optim_kind != (uint32_t)t->o->optim.kind || c.noptim != S)
        st = st_fail(ST_ERR_MISMATCH, "checkpoint %s was written with another --optimizer (or momentum)", path);
    else if (t->text && (c.nalphabet != (uint32_t)st_text_vocab(t->text) ||
                         memcmp(c.alphabet, st_text_alphabet(t->text), c.nalphabet)))
        st = st_fail(ST_ERR_MISMATCH, "checkpoint %s: its vocabulary (%u symbols) differs from --text %s's (%d): "
                                      "token ids would mean other characters", path, c.nalphabet,
                     st_text_source(t->text, ST_TEXT_TRAIN), st_text_vocab(t->text));
    else if (c.seed != t->o->seed)
        st = st_fail(ST_ERR_MISMATCH, "checkpoint %s was written with --seed %llu, not %llu", path,
                     (unsigned long long)c.seed, (unsigned long long)t->o->seed);
    if (st == ST_OK) {
        memcpy(p, c.params, P * sizeof(float));
        if (B)
            memcpy(b, c.buffers, B * sizeof(float));
        if (S)
            memcpy(s, c.optim_state, S * sizeof(float));
        st_optim_set_steps(t->opt, c.optim_steps);
        t->epoch = c.epoch;
        t->epoch_pos = c.epoch_pos;
        t->step = c.step;
        t->best_acc = c.best_accuracy;
        t->elapsed_before = c.elapsed_s;
        say(t, "resumed from %s: epoch %llu, step %llu (written by %u instance%s)\n", path,
            (unsigned long long)c.epoch + 1, (unsigned long long)c.step, c.world_size, c.world_size == 1 ? "" : "s");
    }
    st_ckpt_free(&c);
    return st;
}

/* ------------------------------------------------------------- one step -- */

static uint64_t params_hash(st_net *net)
{
    size_t P;
    const unsigned char *b = (const unsigned char *)st_net_params(net, &P);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < P * sizeof(float); i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static st_status check_replicas(struct trainer *t)
{
    uint64_t mine = params_hash(t->net), root = mine;
    st_status st = comm_broadcast(&t->comm, &root, sizeof root, 0);
    float differs = mine != root;
    if (st == ST_OK)
        st = comm_allreduce(&t->comm, &differs, 1, ST_SUM);
    if (st == ST_OK && differs > 0)
        return st_fail(ST_ERR_MISMATCH, "step %llu: %s parameters differ from rank 0's (hash %016llx vs %016llx)",
                       (unsigned long long)t->step, mine != root ? "this rank's" : "another rank's",
                       (unsigned long long)mine, (unsigned long long)root);
    return st;
}

/* The gradient average over every rank.  In bf16 the gradients travel
 * rounded (summed in fp32 and rounded once by the collectives); the tail
 * (loss, accuracy, the stop and non-finite flags) stays fp32. */
static st_status exchange(struct trainer *t)
{
    if (t->ov.started) {  /* the buckets went during backward; the tail goes now */
        st_status st = overlap_finish(&t->ov);
        return st != ST_OK ? st : comm_allreduce(&t->comm, t->grads + t->P, TAIL, ST_AVG);
    }
    if (!t->grads_bf16)
        return comm_allreduce(&t->comm, t->grads, t->P + TAIL, ST_AVG);
    st_bf16_from_f32_n(t->grads_bf16, t->grads, t->P);
    st_status st = comm_allreduce_bf16(&t->comm, t->grads_bf16, t->P, ST_AVG);
    if (st == ST_OK)
        st = comm_allreduce(&t->comm, t->grads + t->P, TAIL, ST_AVG);
    if (st == ST_OK)
        st_bf16_to_f32_n(t->grads, t->grads_bf16, t->P);
    return st;
}

/* Forward and backward over the step's micro-batches (one without
 * --grad-accum), leaving their mean gradient in t->grads (the buckets'
 * share of it already on its way with --bucket-mb), their mean loss and
 * accuracy in *loss and *accuracy. */
static st_status micro_batches(struct trainer *t, float *loss, float *accuracy)
{
    const st_train_options *o = t->o;
    double loss_sum = 0, correct_sum = 0;
    for (int m = 0; m < t->accum_steps; m++) {
        float l;
        int correct;
        st_status st;
        st_net_set_dropout_seed(t->net, o->seed * 0x9e3779b97f4a7c15ull + t->step * (uint64_t)t->accum_steps + (uint64_t)m);
        accum_begin(&t->acc, m);
        if ((st = train_fill_batch(t, m)) != ST_OK || (st = st_net_forward(t->net, t->x)) != ST_OK ||
            (st = st_net_loss(t->net, t->y, &l, &correct)) != ST_OK || (st = st_net_backward(t->net)) != ST_OK)
            return st;
        accum_add(&t->acc, m);
        loss_sum += l;
        correct_sum += correct;
    }
    if (!t->ov.started)
        accum_finish(&t->acc);
    *loss = (float)(loss_sum / t->accum_steps);
    *accuracy = (float)(correct_sum / ((double)t->accum_steps * o->batch * st_model_positions(t->model)));
    return ST_OK;
}

static st_status train_step(struct trainer *t, float *lr_out, bool *stop)
{
    const st_train_options *o = t->o;
    const double t0 = now_s();
    float loss, accuracy;
    st_status st;
    if ((st = micro_batches(t, &loss, &accuracy)) != ST_OK)
        return st;
    float *tail = t->grads + t->P;
    tail[0] = loss;
    tail[1] = accuracy;
    tail[2] = atomic_load(&stop_requested) ? 1.0f : 0.0f;
    tail[3] = isfinite(loss) ? 0.0f : 1.0f;
    const double t1 = now_s(), w0 = st_group_wait_seconds(t->comm.local);
    if ((st = exchange(t)) != ST_OK)
        return st;
    const double t2 = now_s();
    t->t_wait += st_group_wait_seconds(t->comm.local) - w0;
    if (tail[3] > 0 || !isfinite(tail[0]))
        return st_fail(ST_ERR_FORMAT, "step %llu: the loss is not finite (NaN/Inf); stopping, the last good "
                                      "checkpoint (%s) is kept; lower --lr or set --clip-norm",
                       (unsigned long long)t->step, o->checkpoint);
    float norm = st_clip_grad_norm(t->grads, t->P, o->clip_norm);
    if (!isfinite(norm))
        return st_fail(ST_ERR_FORMAT, "step %llu: the gradients are not finite (NaN/Inf); stopping, the last "
                                      "good checkpoint (%s) is kept", (unsigned long long)t->step, o->checkpoint);
    float lr = st_schedule_lr(&t->sched, t->step) * (o->scale_lr ? (float)t->world : 1.0f);
    st_optim_step(t->opt, st_net_params(t->net, NULL), t->grads, lr);
    const double t3 = now_s();
    t->t_compute += (t1 - t0) + (t3 - t2);
    t->t_reduce += t2 - t1;
    t->loss_sum += tail[0];
    t->correct_sum += tail[1];
    t->interval_steps++;
    t->step++;
    t->epoch_pos += t->global_batch;
    *lr_out = lr;
    *stop = tail[2] > 0;
    return ST_OK;
}

/* ----------------------------------------------------------------- run -- */

static st_status setup(struct trainer *t)
{
    const st_train_options *o = t->o;
    st_status st;
    if (o->flush_denormals)
        st_nn_flush_denormals(true);
    if ((st = st_model_load(&t->model, o->model)) != ST_OK)
        return st;
    t->P = st_model_param_count(t->model);
    const size_t f32_bytes = ((t->P + TAIL) * sizeof(float) + 63) / 64 * 64;
    const size_t bf16_bytes = o->allreduce_dtype == ST_DTYPE_BF16 ? t->P * sizeof(st_bf16) : 0;
    if ((st = comm_join(&t->comm, f32_bytes + bf16_bytes)) != ST_OK)
        return st;
    t->rank = t->comm.rank;
    t->world = t->comm.world;
    t->tty = t->rank == 0 && (isatty(STDOUT_FILENO) || getenv(ST_ENV_CONSOLE_TTY));
    if ((st = train_load_data(t)) != ST_OK)
        return st;
    t->grads = st_group_buffer(t->comm.local, NULL);
    if (bf16_bytes)
        t->grads_bf16 = (st_bf16 *)((char *)t->grads + f32_bytes);
    if (o->bucket_mb > 0 && bf16_bytes)
        return st_fail(ST_ERR_INVALID, "--bucket-mb goes with --allreduce-dtype fp32 (bf16 buckets are not built yet)");
    st_net_config nc = {.batch = o->batch, .grad_buffer = t->grads, .precision = o->precision};
    st_optim_config oc = o->optim;
    if (t->text) {  /* nanoGPT's AdamW: matrices decay, biases and norms do not */
        if (!(t->decay_mask = malloc(t->P ? t->P : 1)))
            return st_fail(ST_ERR_NOMEM, "train: out of memory");
        st_model_decay_mask(t->model, t->decay_mask);
        oc.decay_mask = t->decay_mask;
    }
    if ((st = st_net_create(&t->net, t->model, &nc)) != ST_OK || (st = st_optim_create(&t->opt, t->P, &oc)) != ST_OK)
        return st;
    t->accum_steps = o->grad_accum > 1 ? o->grad_accum : 1;
    t->global_batch = (size_t)t->world * (size_t)o->batch * (size_t)t->accum_steps;
    if ((st = accum_init(&t->acc, t->grads, t->P, t->accum_steps)) != ST_OK)
        return st;
    if (o->bucket_mb > 0) {
        if (!t->comm.any_thread)
            return st_fail(ST_ERR_INVALID, "--bucket-mb: this MPI cannot run collectives from a second thread "
                                           "(no MPI_THREAD_SERIALIZED); leave it at 0");
        if ((st = overlap_start(&t->ov, &t->comm, t->grads, t->P, o->bucket_mb)) != ST_OK)
            return st;
        t->acc.next = overlap_ready;
        t->acc.next_ctx = &t->ov;
        st_net_on_grads_ready(t->net, accum_ready, &t->acc);  /* passes each range on when it is final */
    }
    st_net_init(t->net, o->seed);
    if ((st = train_alloc_batch(t)) != ST_OK)
        return st;
    t->steps_per_epoch = (long)(train_samples(t) / t->global_batch);
    if (t->steps_per_epoch < 1)
        t->steps_per_epoch = 1;
    t->sched = o->schedule;
    if (!t->sched.total) {
        long total = t->steps_per_epoch * o->epochs;
        t->sched.total = (uint64_t)(o->max_steps && o->max_steps < total ? o->max_steps : total);
    }
    return ST_OK;
}

static st_status maybe_resume(struct trainer *t)
{
    const char *path = t->o->resume;
    const char *restarts = getenv(ST_ENV_RESTART_COUNT);
    struct stat sb;
    if (!path && restarts && atoi(restarts) > 0 && stat(t->o->checkpoint, &sb) == 0)
        path = t->o->checkpoint;  /* a restarted gang continues where it stopped */
    st_status st = path ? restore(t, path) : ST_OK;
    /* Every rank must agree before going on: one bad read stops all. */
    float bad = st != ST_OK;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", st_last_error());
    st_status rs = comm_allreduce(&t->comm, &bad, 1, ST_SUM);
    if (rs != ST_OK)
        return rs;
    if (bad > 0)
        return st != ST_OK ? st_fail(st, "%s", saved) : st_fail(ST_ERR_PEER_DEAD, "another rank could not resume");
    /* Identical replicas from the start (and after a resume). */
    size_t P, B;
    float *p = st_net_params(t->net, &P), *b = st_net_buffers(t->net, &B);
    if ((st = comm_broadcast(&t->comm, p, P * sizeof(float), 0)) != ST_OK)
        return st;
    return B ? comm_broadcast(&t->comm, b, B * sizeof(float), 0) : ST_OK;
}

static void open_metrics(struct trainer *t)
{
    if (t->rank != 0)
        return;
    char path[1024];
    const char *dir = getenv(ST_ENV_LOG_DIR);
    if (t->o->metrics)
        snprintf(path, sizeof path, "%s", t->o->metrics);
    else
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir ? dir : ".");
    t->metrics = fopen(path, t->step ? "a" : "w");
    if (!t->metrics)
        fprintf(stderr, "shmtrain: --metrics %s: cannot open: %s (continuing without)\n", path, strerror(errno));
}

/* What ran, so a report can say what it compares (shmrun --sweep reads it). */
static void run_record(struct trainer *t)
{
    st_record r = {.type = ST_RECORD_RUN,
                   .u.run = {.system = "shmtrain", .instances = t->world, .threads = omp_get_max_threads(),
                             .params = (long long)t->P, .batch_per_instance = t->o->batch, .first_step = t->step,
                             .grad_accum = t->accum_steps > 1 ? t->accum_steps : 0,
                             .context = t->text ? t->context : 0}};
    snprintf(r.u.run.model, sizeof r.u.run.model, "%s", t->o->model);
    st_nn_onednn_version(r.u.run.onednn, sizeof r.u.run.onednn);
    snprintf(r.u.run.isa, sizeof r.u.run.isa, "%s", st_nn_onednn_isa());
    snprintf(r.u.run.allreduce_dtype, sizeof r.u.run.allreduce_dtype, "%s", st_dtype_name(t->o->allreduce_dtype));
    snprintf(r.u.run.precision, sizeof r.u.run.precision, "%s", st_dtype_name(t->o->precision));
    record(t, &r);
}

static void summary(struct trainer *t, st_train_result *r)
{
    const double total = now_s() - t->start + t->elapsed_before;
    const double sps = t->train_seconds > 0 ? r->samples_per_s : 0;
    if (t->text)
        say(t, "done: %ld steps in %.1f s (%.0f tokens/s training), final validation loss %.4f (%.3f bits per "
               "character)\n", r->steps, total, sps * t->context, t->last_loss, t->last_loss / log(2.0));
    else
        say(t, "done: %ld steps in %.1f s (%.0f samples/s training), final test accuracy %.2f%%, best %.2f%%\n",
            r->steps, total, sps, 100 * t->last_acc, 100 * t->best_acc);
    st_record rec = {.type = ST_RECORD_SUMMARY,
                     .u.summary = {.steps = r->steps, .instances = t->world, .batch_per_instance = t->o->batch,
                                   .total_s = total, .train_s = t->train_seconds, .samples_per_s = sps,
                                   .tokens_per_s = t->text ? sps * t->context : 0,
                                   .final_test_accuracy = t->last_acc, .best_test_accuracy = t->best_acc}};
    for (size_t i = 0; i < NTHRESH; i++)
        if (t->reached_at[i] >= 0) {
            say(t, "      reached %.0f%% test accuracy after %.1f s (step %ld)\n", 100 * THRESHOLDS[i],
                t->reached_at[i], t->reached_step[i]);
            st_summary_record *s = &rec.u.summary;
            s->reached_accuracy[s->nreached] = THRESHOLDS[i];
            s->reached_s[s->nreached++] = t->reached_at[i];
        }
    record(t, &rec);
}

static void teardown(struct trainer *t, bool failed)
{
    if (t->metrics)
        fclose(t->metrics);
    free(t->x);
    free(t->y);
    free(t->order);
    st_optim_destroy(t->opt);
    st_net_destroy(t->net);
    st_dataset_destroy(t->train);
    st_dataset_destroy(t->test);
    st_text_destroy(t->text);
    free(t->decay_mask);
    overlap_stop(&t->ov);
    accum_free(&t->acc);
    comm_leave(&t->comm, failed);
    st_model_destroy(t->model);
}

/* --target-accuracy (classifiers) or --target-loss (language models), at the last evaluation. */
static bool reached_target(const struct trainer *t)
{
    const st_train_options *o = t->o;
    return (o->target_accuracy > 0 && t->best_acc >= o->target_accuracy) ||
           (o->target_loss > 0 && t->last_eval_step >= 0 && t->last_loss <= o->target_loss);
}

static st_status loop(struct trainer *t, st_train_result *r)
{
    const st_train_options *o = t->o;
    const size_t global = t->global_batch, n = t->text ? (size_t)t->steps_per_epoch * global
                                                                        : st_dataset_size(t->train);
    st_status st = ST_OK;
    bool stop = false, done = false;
    float lr = o->schedule.lr;
    double train_start = now_s();
    t->interval_start = train_start;
    for (; t->epoch < (uint64_t)o->epochs && !done && st == ST_OK; t->epoch++, t->epoch_pos = 0) {
        if (!t->text)
            st_epoch_order(t->order, n, o->seed, t->epoch);
        while (t->epoch_pos + global <= n && st == ST_OK) {
            if (o->max_steps && (long)t->step >= o->max_steps) {
                done = true;
                break;
            }
            if ((st = train_step(t, &lr, &stop)) != ST_OK)
                break;
            if (t->interval_steps && ((long)t->step % o->log_every == 0))
                log_interval(t, lr);
            if (o->check_replicas && (long)t->step % o->check_replicas == 0 && (st = check_replicas(t)) != ST_OK)
                break;
            if (o->eval_every && (long)t->step % o->eval_every == 0 && (st = eval_and_report(t)) != ST_OK)
                break;
            if (o->checkpoint_every && (long)t->step % o->checkpoint_every == 0 && (st = save(t)) != ST_OK)
                break;
            if (stop) {
                say(t, "\nstopping on request after step %llu\n", (unsigned long long)t->step);
                st = save(t);
                r->interrupted = true;
                return st == ST_OK ? ST_ERR_INTERRUPTED : st;
            }
            if (reached_target(t))
                done = true;
            if (done)
                break;
        }
        if (st != ST_OK || done)
            break;
        if (t->interval_steps)
            log_interval(t, lr);
        if (!o->eval_every && (st = eval_and_report(t)) != ST_OK)
            break;
        if (reached_target(t))
            done = true;
    }
    t->train_seconds = now_s() - train_start;
    if (st != ST_OK)
        return st;
    if (t->interval_steps)
        log_interval(t, lr);
    if (t->last_eval_step != (long)t->step)
        st = eval_and_report(t);
    if (st == ST_OK)
        st = save(t);
    r->steps = (long)t->step;
    return st;
}

st_status st_train_run(const st_train_options *o, st_train_result *r)
{
    struct trainer t = {.o = o, .last_eval_step = -1};
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < NTHRESH; i++)
        t.reached_at[i] = -1;
    if (o->batch < 1 || o->epochs < 1 || o->log_every < 1)
        return st_fail(ST_ERR_INVALID, "--batch-size, --epochs and --log-every must be at least 1");
    t.start = now_s();
    st_status st = setup(&t);
    if (st == ST_OK)
        st = maybe_resume(&t);
    t.first_step = t.step;
    if (st == ST_OK) {
        open_metrics(&t);
        run_record(&t);
        char accum[40] = "";
        if (t.accum_steps > 1)
            snprintf(accum, sizeof accum, " x %d micro-batches", t.accum_steps);
        if (t.rank == 0 && !o->quiet && t.text) {
            printf("shmtrain: %d instance%s x batch %d%s x context %d, model %s (%zu parameters), %zu training / "
                   "%zu validation tokens, vocabulary %d\n", t.world, t.world == 1 ? "" : "s", o->batch, accum, t.context,
                   o->model, t.P, st_text_tokens_in(t.text, ST_TEXT_TRAIN), st_text_tokens_in(t.text, ST_TEXT_VAL),
                   st_text_vocab(t.text));
            fflush(stdout);
        } else if (t.rank == 0 && !o->quiet) {
            printf("shmtrain: %d instance%s x batch %d%s, model %s (%zu parameters), %zu training / %zu test samples\n",
                   t.world, t.world == 1 ? "" : "s", o->batch, accum, o->model, t.P, st_dataset_size(t.train),
                   st_dataset_size(t.test));
            fflush(stdout);
        }
        st = loop(&t, r);
        r->steps = (long)t.step;
        r->best_accuracy = t.best_acc;
        r->final_accuracy = t.last_acc;
        r->final_loss = t.last_loss;
        r->seconds = now_s() - t.start + t.elapsed_before;
        if (t.train_seconds > 0)
            r->samples_per_s = (double)((t.step - t.first_step) * t.global_batch) / t.train_seconds;
        if (st == ST_OK)
            summary(&t, r);
    }
    char saved[512];
    snprintf(saved, sizeof saved, "%s", st_last_error());
    teardown(&t, st != ST_OK && st != ST_ERR_INTERRUPTED);
    if (st != ST_OK && st != ST_ERR_INTERRUPTED)
        st_fail(st, "%s", saved);
    return st;
}
