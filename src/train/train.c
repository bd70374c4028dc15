/* The data-parallel training loop and checkpoints (what it reports and the
 * evaluation are in report.c).  The only module that sees nn, data, coll
 * and ckpt at once. */
#define _GNU_SOURCE
#include "shmtrain/train.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer.h"
#include "shmtrain/bf16.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/coll.h"
#include "shmtrain/data.h"
#include "shmtrain/env.h"
#include "shmtrain/metrics.h"
#include "shmtrain/paths.h"
#include "shmtrain/shmname.h"
#include "shmtrain/nn.h"

static atomic_bool stop_requested;  /* set by main's signal thread */
void st_train_request_stop(void) { atomic_store(&stop_requested, true); }

void st_train_defaults(st_train_options *o)
{
    memset(o, 0, sizeof *o);
    o->model = "lenet";
    o->data_dir = "/usr/share/datasets/fashion-mnist";
    o->epochs = 0;  /* not given (st_train_options) */
    o->batch = 64;
    o->schedule = (st_schedule){.kind = ST_SCHED_CONSTANT, .lr = 0.05f};
    o->optim = (st_optim_config){.kind = ST_OPTIM_SGD, .momentum = 0.9f};
    o->seed = 1;
    o->log_every = 50;
    o->checkpoint = "shmtrain.ckpt";
    o->flush_denormals = true;
    o->eval_windows = 256;
    o->val_fraction = 0.1f;
    o->data_workers = 2;
}

st_status st_train_model_load(st_model **m, const char *name)
{
    if (!st_ckpt_is_checkpoint(name))
        return st_model_load(m, name);
    char *text;
    st_status st = st_ckpt_read_model_text(name, &text);
    if (st == ST_OK)
        st = st_model_parse(m, text, name);
    free(text);
    return st;
}

/* --------------------------------------------------------- checkpoints -- */

static st_status save(struct trainer *t)
{
    if (t->rank != 0 || !t->o->checkpoint)  /* --no-checkpoint */
        return ST_OK;
    st_status st = train_save_to(t, t->o->checkpoint);
    t->saved |= st == ST_OK;
    return st;
}

/* A --checkpoint-every save that fails (a full disk, a quota) costs that
 * checkpoint, not the run: a three-day run goes on and the next one tries
 * again; the previous file is whole (st_ckpt_write writes aside, then
 * renames).  The end's save, and a stop's, still fail the run. */
static st_status save_periodic(struct trainer *t)
{
    st_status st = save(t);
    if (st == ST_OK)
        train_keep_last(t);
    if (st != ST_ERR_IO)
        return st;
    fprintf(stderr, "shmtrain: warning: step %llu: %s; training goes on (the next checkpoint at step %llu)\n",
            (unsigned long long)t->step, st_last_error(),
            (unsigned long long)t->step + (unsigned long long)t->o->checkpoint_every);
    return ST_OK;
}

/* What a stop on a bad loss leaves, as it is: this run's last checkpoint,
 * an older file it never wrote, or nothing. */
static const char *kept(const struct trainer *t, char *buf, size_t len)
{
    if (!t->o->checkpoint)
        snprintf(buf, len, "no checkpoint is written (--no-checkpoint)");
    else if (t->saved)
        snprintf(buf, len, "the last good checkpoint (%s) is kept", t->o->checkpoint);
    else if (access(t->o->checkpoint, F_OK) == 0)
        snprintf(buf, len, "%s, from before this run, is untouched", t->o->checkpoint);
    else
        snprintf(buf, len, "no checkpoint was written (none was due yet)");
    return buf;
}

static st_status restore(struct trainer *t, const char *path)
{
    st_ckpt c;
    st_status st = st_ckpt_read(path, &c);
    if (st != ST_OK)
        return st;
    size_t P, B, S;
    float *p = st_net_params(t->net, &P), *b = st_net_buffers(t->net, &B), *s = st_optim_state(t->opt, &S);
    const st_ckpt_expect want = {.model_text = st_model_text(t->model), .nparams = P, .nbuffers = B, .optim = true,
                                 .optim_kind = (uint32_t)t->o->optim.kind, .noptim = S,
                                 .vocab = st_model_vocab(t->model)};
    if ((st = st_ckpt_check(&c, path, &want)) == ST_OK && t->text &&
        (c.nalphabet != (uint32_t)st_text_alphabet_len(t->text) ||
         (c.nalphabet && memcmp(c.alphabet, st_text_alphabet(t->text), c.nalphabet))))
        st = st_fail(ST_ERR_MISMATCH, "checkpoint %s: its alphabet (%u symbols) differs from that of %s (%d): "
                                      "token ids would mean other characters", path, c.nalphabet,
                     st_text_source(t->text, ST_TEXT_TRAIN), st_text_alphabet_len(t->text));
    if (st == ST_OK && c.seed != t->o->seed)
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
        if (c.has_kept_best)
            t->kept_best = c.kept_best;
        t->elapsed_before = c.elapsed_s;
        train_say(t, "resumed from %s: epoch %llu, step %llu (written by %u instance%s)\n", path,
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
        st = comm_allreduce(&t->comm, &differs, 1, ST_DTYPE_F32, ST_SUM);
    t->replica_checks += st == ST_OK && differs == 0;
    if (st == ST_OK && differs > 0)
        return st_fail(ST_ERR_MISMATCH, "step %llu: %s parameters differ from rank 0's (hash %016llx vs %016llx)",
                       (unsigned long long)t->step, mine != root ? "this rank's" : "another rank's",
                       (unsigned long long)mine, (unsigned long long)root);
    return st;
}

/* The gradient average over every rank.  With --allreduce-dtype bf16 or fp16
 * the gradients travel rounded (the collectives round, sum in fp32, round once
 * and widen); the tail (loss, accuracy, the stop and non-finite flags)
 * always travels fp32. */
static st_status exchange(struct trainer *t)
{
    const st_dtype wire = t->o->allreduce_dtype;
    st_status st = ST_OK;
    if (t->independent)  /* the tail holds this rank's own values, as the loop reads them */
        return ST_OK;
    if (t->ov.started)  /* the buckets went during backward; the tail goes now */
        st = overlap_finish(&t->ov);
    else if (wire == ST_DTYPE_F32)
        return comm_allreduce(&t->comm, t->grads, t->P + TAIL, ST_DTYPE_F32, ST_AVG);
    else
        st = comm_allreduce(&t->comm, t->grads, t->P, wire, ST_AVG);
    return st != ST_OK ? st : comm_allreduce(&t->comm, t->grads + t->P, TAIL, ST_DTYPE_F32, ST_AVG);
}

static st_status train_step(struct trainer *t, float *lr_out, bool *stop)
{
    const st_train_options *o = t->o;
    const double t0 = st_now_s();
    const uint64_t calls = t->comm.allreduces;
    float loss, accuracy;
    st_status st;
    if ((st = train_micro_batches(t, &loss, &accuracy)) != ST_OK)
        return st;
    float *tail = t->grads + t->P;
    tail[0] = loss;
    tail[1] = accuracy;
    tail[2] = atomic_load(&stop_requested) ? 1.0f : 0.0f;
    tail[3] = isfinite(loss) ? 0.0f : 1.0f;
    tail[4] = (float)t->step_taken;
    const double t1 = st_now_s(), w0 = comm_wait_seconds(&t->comm);
    if ((st = exchange(t)) != ST_OK)
        return st;
    const double t2 = st_now_s();
    t->step_allreduces += t->comm.allreduces - calls;
    /* With --bucket-mb a bucket's wait can begin during backward and end
     * here; only the part inside the exchange is the step's waiting. */
    const double waited = comm_wait_seconds(&t->comm) - w0;
    t->t_wait += waited < t2 - t1 ? waited : t2 - t1;
    char why[300];
    if ((st = train_check_taken(t, tail[4])) != ST_OK)
        return st;
    if (tail[3] > 0 || !isfinite(tail[0]))
        return st_fail(ST_ERR_FORMAT, "step %llu: the loss is not finite (NaN/Inf); stopping, %s; lower --lr or "
                                      "set --clip-norm", (unsigned long long)t->step, kept(t, why, sizeof why));
    const float norm = st_grad_norm(t->grads, t->P);
    if (!isfinite(norm))
        return st_fail(ST_ERR_FORMAT, "step %llu: the gradients are not finite (NaN/Inf); stopping, %s",
                       (unsigned long long)t->step, kept(t, why, sizeof why));
    float lr = st_schedule_lr(&t->sched, t->step) * (o->scale_lr ? (float)t->world : 1.0f);
    st_optim_step_scaled(t->opt, t->params, t->grads, st_clip_scale(norm, o->clip_norm), lr);
    const double t3 = st_now_s();
    t->t_compute += (t1 - t0) + (t3 - t2);
    t->t_reduce += t2 - t1;
    step_times_add(&t->times, t3 - t0, (t1 - t0) + (t3 - t2), t2 - t1, waited < t2 - t1 ? waited : t2 - t1);
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

/* The budget, as nanoGPT's max_iters and Hugging Face's max_steps: a step
 * count given alone is the budget, whatever the epochs (they then only say
 * how often the data is reshuffled); with an epoch count too, whichever
 * ends first; with neither, one epoch. */
static long epoch_budget(const st_train_options *o)
{
    return o->epochs ? o->epochs : o->max_steps ? LONG_MAX : 1;
}

static long step_budget(const struct trainer *t)
{
    const st_train_options *o = t->o;
    const long by_epochs = o->epochs || !o->max_steps ? t->steps_per_epoch * epoch_budget(o) : LONG_MAX;
    return o->max_steps && o->max_steps < by_epochs ? o->max_steps : by_epochs;
}

/* The start line's words for what ends the run. */
static void describe_budget(const struct trainer *t, char *buf, size_t len)
{
    const st_train_options *o = t->o;
    const long steps = t->steps_total;
    if (o->max_steps && steps == o->max_steps)
        snprintf(buf, len, "%ld steps (--max-steps; %.1f epochs of %ld steps)", steps,
                 (double)steps / (double)t->steps_per_epoch, t->steps_per_epoch);
    else
        snprintf(buf, len, "%ld epoch%s of %ld steps (--epochs%s)", t->epochs_total, t->epochs_total == 1 ? "" : "s",
                 t->steps_per_epoch, o->max_steps ? ", before --max-steps" : "");
}

/* An output that is one of the inputs, through any path, would be written
 * over it: refused before anything is read. */
static st_status check_outputs(const st_train_options *o)
{
    const struct {
        const char *flag, *path;
    } in[] = {{"--model", o->model},           {"--train-images", o->train_images}, {"--train-labels", o->train_labels},
              {"--test-images", o->test_images}, {"--test-labels", o->test_labels}, {"--npy-images", o->npy_images},
              {"--npy-labels", o->npy_labels},   {"--npy-test-images", o->npy_test_images},
              {"--npy-test-labels", o->npy_test_labels}, {"--text", o->text[0]}, {"--text", o->text[1]},
              {"--tokens-bin", o->tokens_bin},   {"--val-bin", o->val_bin},   {"--init-from", o->init_from}},
      out[] = {{"--checkpoint", o->checkpoint}, {"--metrics", o->metrics}};
    for (size_t i = 0; i < sizeof out / sizeof *out; i++)
        for (size_t k = 0; k < sizeof in / sizeof *in; k++)
            if (st_same_file(out[i].path, in[k].path))
                return st_fail(ST_ERR_INVALID, "%s %s is the same file as %s %s: it would be written over; give "
                                               "another name", out[i].flag, out[i].path, in[k].flag, in[k].path);
    return ST_OK;
}

/* How a step's gradients are gathered and exchanged: micro-batches, the
 * balance, and --bucket-mb's buckets sent during backward. */
static st_status setup_exchange(struct trainer *t)
{
    const st_train_options *o = t->o;
    st_status st;
    t->accum_steps = o->grad_accum > 1 ? o->grad_accum : 1;
    t->global_batch = (size_t)t->world * (size_t)o->batch * (size_t)t->accum_steps;
    const bool dynamic = o->balance == ST_BALANCE_DYNAMIC;
    t->independent = o->balance == ST_BALANCE_INDEPENDENT;
    if ((st = accum_init(&t->acc, t->grads, t->P, t->accum_steps, dynamic)) != ST_OK ||
        (st = balance_init(&t->bal, &t->comm, t->accum_steps, dynamic)) != ST_OK)
        return st;
    /* Dynamic: an instance cannot tell which of its micro-batches is its
     * last, so no bucket can go during backward; they go after it. */
    if (o->bucket_mb > 0 && !dynamic && !t->independent) {
        if (!t->comm.any_thread)
            return st_fail(ST_ERR_INVALID, "--bucket-mb: this MPI cannot run collectives from a second thread "
                                           "(no MPI_THREAD_SERIALIZED); leave it at 0");
        if ((st = overlap_start(&t->ov, &t->comm, t->grads, t->P, o->allreduce_dtype, o->bucket_mb)) != ST_OK)
            return st;
        t->acc.next = overlap_ready;
        t->acc.next_ctx = &t->ov;
        st_net_on_grads_ready(t->net, accum_ready, &t->acc);  /* passes each range on when it is final */
    }
    return ST_OK;
}

static st_status setup(struct trainer *t)
{
    const st_train_options *o = t->o;
    st_status st;
    if ((st = check_outputs(o)) != ST_OK)
        return st;
    if (o->flush_denormals)
        st_nn_flush_denormals(true);
    if ((st = st_train_model_load(&t->model, o->model)) != ST_OK)
        return st;
    t->P = st_model_param_count(t->model);
    const size_t f32_bytes = ((t->P + TAIL) * sizeof(float) + 63) / 64 * 64;
    if ((st = comm_join(&t->comm, f32_bytes)) != ST_OK)
        return st;
    t->rank = t->comm.rank;
    t->world = t->comm.world;
    t->tty = t->rank == 0 && (isatty(STDOUT_FILENO) || st_env_set(ST_ENV_CONSOLE_TTY));
    if ((st = train_load_data(t)) != ST_OK)
        return st;
    t->grads = comm_zero_copy_buffer(&t->comm);
    st_net_config nc = {.batch = o->batch, .grad_buffer = t->grads, .precision = o->precision, .tuning = o->tuning};
    st_optim_config oc = o->optim;
    if (t->text) {  /* nanoGPT's AdamW: matrices decay, biases and norms do not */
        if (!(t->decay_mask = malloc(t->P ? t->P : 1)))
            return st_fail(ST_ERR_NOMEM, "train: out of memory");
        st_model_decay_mask(t->model, t->decay_mask);
        oc.decay_mask = t->decay_mask;
    }
    if ((st = train_kernels(t, &nc)) != ST_OK || (st = st_net_create(&t->net, t->model, &nc)) != ST_OK ||
        (st = st_optim_create(&t->opt, t->P, &oc)) != ST_OK)
        return st;
    train_kernels_keep(t);
    t->params = st_net_params(t->net, NULL);
    int ncopies;
    const st_weight_copy *copies = st_net_weight_copies(t->net, &ncopies);
    st_optim_set_copies(t->opt, copies, ncopies);  /* the bf16 weights, written as the masters are updated */
    if ((st = setup_exchange(t)) != ST_OK)
        return st;
    st_net_init(t->net, o->seed);
    if ((st = train_alloc_batch(t)) != ST_OK)
        return st;
    t->steps_per_epoch = (long)(train_samples(t) / t->global_batch);
    if (t->steps_per_epoch < 1)
        t->steps_per_epoch = 1;
    t->epochs_total = epoch_budget(o);
    t->steps_total = step_budget(t);
    t->sched = o->schedule;
    if (!t->sched.total)
        t->sched.total = (uint64_t)t->steps_total;
    return ST_OK;
}

static st_status maybe_resume(struct trainer *t)
{
    const char *path = t->o->resume;
    int restarts = 0;
    struct stat sb;
    if (!st_env_int(ST_ENV_RESTART_COUNT, 0, &restarts))
        return ST_ERR_INVALID;
    if (!path && restarts > 0 && t->o->checkpoint && stat(t->o->checkpoint, &sb) == 0)
        path = t->o->checkpoint;  /* a restarted gang continues where it stopped */
    st_status st = train_check_room(t);  /* a full disk is found now, not at the first save */
    if (st == ST_OK && path)
        st = restore(t, path);
    t->saved = st == ST_OK && path && st_same_file(path, t->o->checkpoint);  /* what a bad loss would leave */
    if (!path && st == ST_OK && t->o->init_from)
        st = st_import_safetensors(t->o->init_from, t->model, st_net_params(t->net, NULL), st_net_buffers(t->net, NULL));
    /* Every rank must agree before going on: one bad read stops all. */
    float bad = st != ST_OK;
    st_kept_error kept;
    st_error_keep(&kept);
    st_status rs = comm_allreduce(&t->comm, &bad, 1, ST_DTYPE_F32, ST_SUM);
    if (rs != ST_OK)
        return rs;
    if (bad > 0)
        return st != ST_OK ? st_error_again(&kept, st) : st_fail(ST_ERR_PEER_DEAD, "another rank could not start (its message says why)");
    /* Identical replicas from the start (and after a resume). */
    size_t P, B;
    float *p = st_net_params(t->net, &P), *b = st_net_buffers(t->net, &B);
    if ((st = comm_broadcast(&t->comm, p, P * sizeof(float), 0)) != ST_OK)
        return st;
    return B ? comm_broadcast(&t->comm, b, B * sizeof(float), 0) : ST_OK;
}

static void teardown(struct trainer *t, bool failed)
{
    if (t->metrics)
        fclose(t->metrics);
    st_tfevents_destroy(t->tb);
    free(t->x);
    free(t->y);
    free(t->order);
    st_optim_destroy(t->opt);
    st_net_destroy(t->net);
    train_close_folder(t);  /* its streams' workers first: they read the labels */
    st_dataset_destroy(t->train);
    st_dataset_destroy(t->test);
    st_text_destroy(t->text);
    free(t->decay_mask);
    overlap_stop(&t->ov);
    accum_free(&t->acc);
    balance_free(&t->bal);
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

/* The steps of one epoch from t->epoch_pos; *stop when a signal asked for
 * it after a step, *done when the budget or the target is reached. */
static st_status run_epoch(struct trainer *t, size_t n, float *lr, bool *stop, bool *done)
{
    const st_train_options *o = t->o;
    st_status st = ST_OK;
    while (t->epoch_pos + t->global_batch <= n) {
        if (o->max_steps && (long)t->step >= o->max_steps) {
            *done = true;
            return ST_OK;
        }
        if ((st = train_step(t, lr, stop)) != ST_OK)
            return st;
        if (t->interval_steps && ((long)t->step % o->log_every == 0))
            train_log_interval(t, *lr);
        if (o->check_replicas && (long)t->step % o->check_replicas == 0 && (st = check_replicas(t)) != ST_OK)
            return st;
        if (o->eval_every && (long)t->step % o->eval_every == 0 && (st = train_eval_and_report(t)) != ST_OK)
            return st;
        if (o->checkpoint_every && (long)t->step % o->checkpoint_every == 0 && (st = save_periodic(t)) != ST_OK)
            return st;
        if (*stop)
            return ST_OK;
        if (reached_target(t)) {
            *done = true;
            return ST_OK;
        }
    }
    return ST_OK;
}

static st_status stop_on_request(struct trainer *t, st_train_result *r)
{
    const st_train_options *o = t->o;
    train_say(t, "\nstopping on request after step %llu\n", (unsigned long long)t->step);
    st_status st = save(t);
    if (st == ST_OK && o->checkpoint)
        train_say(t, "checkpoint: %s (step %llu); --resume %s continues from it\n", o->checkpoint,
                  (unsigned long long)t->step, o->resume_hint ? o->resume_hint : o->checkpoint);
    r->interrupted = true;
    return st == ST_OK ? ST_ERR_INTERRUPTED : st;
}

static st_status loop(struct trainer *t, st_train_result *r)
{
    const st_train_options *o = t->o;
    const size_t n = t->text ? (size_t)t->steps_per_epoch * t->global_batch : st_dataset_size(t->train);
    st_status st = ST_OK;
    bool stop = false, done = false;
    float lr = o->schedule.lr;
    double train_start = st_now_s();
    t->interval_start = train_start;
    t->faults_at = train_page_faults();
    done = o->evaluate_only;  /* --max-steps 0: the evaluation below, nothing trained or saved */
    for (; t->epoch < (uint64_t)t->epochs_total && !done && st == ST_OK; t->epoch++, t->epoch_pos = 0) {
        if (!t->text)
            st_epoch_order(t->order, n, o->seed, t->epoch);
        st = run_epoch(t, n, &lr, &stop, &done);
        if (st == ST_OK && stop)
            return stop_on_request(t, r);
        if (st != ST_OK || done)
            break;
        if (t->interval_steps)
            train_log_interval(t, lr);
        if (!o->eval_every && (st = train_eval_and_report(t)) != ST_OK)
            break;
        if (reached_target(t))
            done = true;
    }
    t->train_seconds = st_now_s() - train_start;
    if (st != ST_OK)
        return st;
    if (t->interval_steps)
        train_log_interval(t, lr);
    if (t->last_eval_step != (long)t->step)
        st = train_eval_and_report(t);
    if (st == ST_OK && !o->evaluate_only)
        st = save(t);
    r->steps = (long)t->step;
    return st;
}

/* A resumed run already at its budget trains nothing and evaluates nothing
 * again (its records hold that step's evaluation): said, and done. */
static bool finished_already(struct trainer *t)
{
    if (!t->step || t->o->evaluate_only || (long)t->step < t->steps_total)
        return false;
    train_say(t, "nothing to train: the run is at step %llu of %ld; a larger --max-steps (or --epochs) goes on\n",
              (unsigned long long)t->step, t->steps_total);
    return true;
}

/* Rank 0's two opening lines: the recipe, then the gang, the model, the data and the budget. */
static void announce(const struct trainer *t)
{
    const st_train_options *o = t->o;
    if (t->rank != 0 || o->quiet)
        return;
    char accum[160] = "", budget[128];
    if (t->accum_steps > 1 || t->bal.dynamic)
        snprintf(accum, sizeof accum, " x %d micro-batches%s%s", t->accum_steps,
                 t->bal.dynamic ? " (balanced: taken by whoever is free)" : "",
                 t->bal.dynamic && o->bucket_mb > 0 ? ", exchanged after backward (not in --bucket-mb buckets)" : "");
    describe_budget(t, budget, sizeof budget);
    char recipe[160];
    train_recipe(o, recipe, sizeof recipe);
    printf("shmtrain: %s%s%s\n", recipe, o->model_recipe ? "; the model's train line: " : "",
           o->model_recipe ? o->model_recipe : "");
    if (t->text) {
        printf("shmtrain: %d instance%s x batch %d%s x context %d, model %s (%zu parameters), %zu training / "
               "%zu validation tokens, vocabulary %d; %s\n", t->world, t->world == 1 ? "" : "s", o->batch, accum,
               t->context, o->model, t->P, st_text_tokens_in(t->text, ST_TEXT_TRAIN),
               st_text_tokens_in(t->text, ST_TEXT_VAL), st_text_vocab(t->text), budget);
        fflush(stdout);
    } else {
        printf("shmtrain: %d instance%s x batch %d%s, model %s (%zu parameters), %zu training / %zu test "
               "samples; %s\n", t->world, t->world == 1 ? "" : "s", o->batch, accum, o->model, t->P,
               st_dataset_size(t->train), st_dataset_size(t->test), budget);
        fflush(stdout);
    }
}

st_status st_train_run(const st_train_options *o, st_train_result *r)
{
    struct trainer t = {.o = o, .last_eval_step = -1, .kept_best = -INFINITY};
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < NTHRESH; i++)
        t.reached_at[i] = -1;
    if (o->batch < 1 || o->epochs < 0 || o->log_every < 1)
        return st_fail(ST_ERR_INVALID, "--batch-size, --epochs and --log-every must be at least 1");
    t.start = st_now_s();
    t.times.warm_steps = o->log_every;  /* what the sweep leaves out of a run's speed too */
    st_status st = setup(&t);
    if (st == ST_OK)
        st = maybe_resume(&t);
    t.first_step = t.step;
    if (st == ST_OK && t.rank == 0 && o->on_start)
        o->on_start(o->on_start_ctx);
    if (st == ST_OK && finished_already(&t)) {
        r->steps = (long)t.step;
        r->best_accuracy = t.best_acc;
    } else if (st == ST_OK) {
        train_open_metrics(&t);
        train_run_record(&t);
        announce(&t);
        st = loop(&t, r);
        r->steps = (long)t.step;
        r->best_accuracy = t.best_acc;
        r->final_accuracy = t.last_acc;
        r->final_loss = t.last_loss;
        r->seconds = st_now_s() - t.start + t.elapsed_before;
        if (t.train_seconds > 0)
            r->samples_per_s = (double)((t.step - t.first_step) * t.global_batch) / t.train_seconds;
        if (st == ST_OK)
            st = train_instances(&t);
        if (st == ST_OK)
            train_summary(&t, r);
        if (st == ST_OK && t.records_lost)  /* the run is whole, its account of itself is not */
            st = st_fail(ST_ERR_IO, "the run finished (%s), but %s", t.saved ? o->checkpoint : "no checkpoint",
                         t.records_why);
    }
    st_kept_error kept;
    st_error_keep(&kept);
    teardown(&t, st != ST_OK && st != ST_ERR_INTERRUPTED);
    if (st != ST_OK && st != ST_ERR_INTERRUPTED)
        st_error_again(&kept, st);
    return st;
}
