/* Which checkpoints a run keeps (trainer.h): the last K of --checkpoint-every
 * as FILE-stepN.ckpt, and the best evaluation's as best.ckpt, the policies
 * Hugging Face's Trainer calls save_total_limit and load_best_model_at_end.
 *
 * A kept step is a hard link to the file just written: st_ckpt_write
 * renames a new file over FILE each time, so the link keeps that one whole
 * and costs no second copy. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "shmtrain/ckpt.h"
#include "shmtrain/nn.h"
#include "shmtrain/optim.h"
#include "shmtrain/paths.h"
#include "shmtrain/text.h"
#include "trainer.h"

#define PATH_LEN 4096

/* "runs/x/shmtrain.ckpt", 300 -> "runs/x/shmtrain-step300.ckpt". */
static void step_name(const char *checkpoint, unsigned long long step, char *out, size_t len)
{
    const char *dot = strrchr(checkpoint, '.'), *slash = strrchr(checkpoint, '/');
    const int stem = dot && (!slash || dot > slash) ? (int)(dot - checkpoint) : (int)strlen(checkpoint);
    snprintf(out, len, "%.*s-step%llu%s", stem, checkpoint, step, stem < (int)strlen(checkpoint) ? dot : "");
}

void train_keep_last(struct trainer *t)
{
    const st_train_options *o = t->o;
    if (t->rank != 0 || !o->checkpoint || o->keep_last < 1 || o->checkpoint_every < 1)
        return;
    char kept[PATH_LEN], old[PATH_LEN];
    step_name(o->checkpoint, t->step, kept, sizeof kept);
    unlink(kept);  /* a resumed run saving this step again */
    if (link(o->checkpoint, kept) != 0) {
        fprintf(stderr, "shmtrain: warning: --keep: %s: %s\n", kept, strerror(errno));
        return;
    }
    const unsigned long long window = (unsigned long long)o->keep_last * (unsigned long long)o->checkpoint_every;
    if (t->step > window) {
        step_name(o->checkpoint, t->step - window, old, sizeof old);
        if (unlink(old) != 0 && errno != ENOENT)
            fprintf(stderr, "shmtrain: warning: --keep: %s: %s\n", old, strerror(errno));
    }
}

/* "a/x.ckpt" -> "a/x-best.ckpt" (a name without an extension: "-best" after it). */
void st_train_best_path(const char *checkpoint, char *out, size_t len)
{
    const char *dot = strrchr(checkpoint, '.'), *slash = strrchr(checkpoint, '/');
    const int stem = dot && (!slash || dot > slash) ? (int)(dot - checkpoint) : (int)strlen(checkpoint);
    snprintf(out, len, "%.*s-best%s", stem, checkpoint, checkpoint + stem);
}

void train_keep_best(struct trainer *t, double accuracy, double loss)
{
    const st_train_options *o = t->o;
    const double score = t->text ? -loss : accuracy;
    /* kept_best: the score best.ckpt holds, through a resume (the checkpoint
     * carries it), so a worse evaluation after one never replaces it */
    if (t->rank != 0 || !o->keep_best || !o->checkpoint || !(score > t->kept_best))
        return;
    char best[PATH_LEN + 16];
    if (o->keep_best_path)
        snprintf(best, sizeof best, "%s", o->keep_best_path);
    else
        st_train_best_path(o->checkpoint, best, sizeof best);
    if (train_save_to(t, best) != ST_OK) {
        fprintf(stderr, "shmtrain: warning: step %llu: --keep-best: %s; training goes on\n",
                (unsigned long long)t->step, st_last_error());
        return;
    }
    t->kept_best = score;
    train_say(t, "      best so far: %s (step %llu, %s %.4f)\n", best, (unsigned long long)t->step,
              t->text ? "validation loss" : "test accuracy", t->text ? loss : accuracy);
}

/* Room for the saves this run makes: a save writes a whole new file beside
 * the old one before its rename (two at once), --keep K holds K more (hard
 * links keep replaced files alive), --keep-best one more; a file there
 * already (a resume's) is space the first save takes back. */
st_status train_check_room(const struct trainer *t)
{
    const st_train_options *o = t->o;
    const char *ckpt = o->checkpoint;
    if (t->rank != 0 || !ckpt)
        return ST_OK;
    size_t nb, no;
    st_net_buffers(t->net, &nb);
    st_optim_state(t->opt, &no);
    const double one = (double)(t->P + nb + no) * sizeof(float) + (double)strlen(st_model_text(t->model)) + 65536;
    const int copies = 2 + (o->checkpoint_every > 0 ? o->keep_last : 0) + (o->keep_best ? 1 : 0);
    struct stat sb;
    const double there = stat(ckpt, &sb) == 0 ? (double)sb.st_size : 0;
    const double need = one * copies - there;
    char dir[PATH_LEN];
    st_path_folder(ckpt, dir, sizeof dir);
    struct statvfs fs;
    if (statvfs(dir, &fs) != 0)
        return ST_OK;  /* nothing to say: the save itself reports what is wrong */
    const double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize;
    if (free_bytes >= need)
        return ST_OK;
    return st_fail(ST_ERR_IO, "checkpoint %s: its saves take about %.1f MB (%d files of %.1f MB at once: the "
                   "checkpoint and its next one%s%s) and %s has %.1f MB free; make room, give --checkpoint on another "
                   "disk, or --no-checkpoint", ckpt, need / 1e6, copies, one / 1e6,
                   o->checkpoint_every > 0 && o->keep_last ? ", --keep's" : "", o->keep_best ? ", the best" : "", dir,
                   free_bytes / 1e6);
}

st_status train_save_to(struct trainer *t, const char *path)
{
    size_t nb, no;
    st_ckpt c = {.model_text = (char *)st_model_text(t->model),
                 .params = st_net_params(t->net, &c.nparams),
                 .buffers = st_net_buffers(t->net, &nb),
                 .optim_state = st_optim_state(t->opt, &no),
                 .optim_kind = (uint32_t)t->o->optim.kind,
                 .optim_steps = st_optim_steps(t->opt),
                 .epoch = t->epoch, .epoch_pos = t->epoch_pos, .step = t->step, .seed = t->o->seed,
                 .world_size = (uint32_t)t->world, .best_accuracy = t->best_acc,
                 .elapsed_s = st_now_s() - t->start + t->elapsed_before,
                 .alphabet = t->text ? (uint8_t *)st_text_alphabet(t->text) : NULL,
                 .nalphabet = t->text ? (uint32_t)st_text_alphabet_len(t->text) : 0,
                 .has_kept_best = isfinite(t->kept_best), .kept_best = t->kept_best};
    c.nbuffers = nb;
    c.noptim = no;
    return st_ckpt_write(path, &c);
}
