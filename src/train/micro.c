/* A step's forward and backward passes over its micro-batches (trainer.h). */
#include <math.h>

#include "trainer.h"

st_status train_micro_batches(struct trainer *t, float *loss, float *accuracy)
{
    const st_train_options *o = t->o;
    double loss_sum = 0, correct_sum = 0;
    int slot_rank, m;
    t->step_taken = 0;
    accum_step(&t->acc);
    balance_step(&t->bal);
    while (balance_next(&t->bal, &slot_rank, &m)) {
        float l;
        int correct;
        st_status st;
        /* the slot's seed, whoever computes it: dynamic drops what static drops */
        st_net_set_dropout_seed(t->net, o->seed * 0x9e3779b97f4a7c15ull + t->step * (uint64_t)t->accum_steps + (uint64_t)m);
        accum_begin(&t->acc, m);
        if ((st = train_fill_batch(t, slot_rank, m)) != ST_OK || (st = st_net_forward(t->net, t->x)) != ST_OK ||
            (st = st_net_loss(t->net, t->y, &l, &correct)) != ST_OK || (st = st_net_backward(t->net)) != ST_OK)
            return st;
        accum_add(&t->acc);
        loss_sum += l;
        correct_sum += correct;
        t->step_taken++;
    }
    if (!t->ov.started)
        accum_finish(&t->acc);
    *loss = (float)(loss_sum / t->accum_steps);
    *accuracy = (float)(correct_sum / ((double)t->accum_steps * o->batch * st_model_positions(t->model)));
    return ST_OK;
}

st_status train_check_taken(struct trainer *t, float mean_taken)
{
    const double expected = (double)t->world * t->accum_steps, got = (double)mean_taken * t->world;
    if (fabs(got - expected) > 0.25)
        return st_fail(ST_ERR_BACKEND, "step %llu: the instances computed %.0f micro-batches of the step's %.0f "
                                       "(--balance %s)", (unsigned long long)t->step, got, expected,
                       t->bal.dynamic ? "dynamic" : "static");
    t->taken_all += (uint64_t)expected;
    return ST_OK;
}
