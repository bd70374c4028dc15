/* The precision plan is the contract between the net and its backends
 * (issue 65): the rules ask the backend what it computes (struct
 * nn_backend's `computes`) and nothing else of it, st_net_create plans
 * every edge before any backend builds, and a builder that finds no
 * kernel for a planned layer says so (nn_plan_fallback), which plans the
 * edges from that layer on again.  On the plan alone (plan_only nets), so
 * it runs on any CPU. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "net.h"
#include "nettest.h"

/* gpt-mini's plan in a low type on the reference backend (which computes
 * everything), with no data behind it. */
static st_net *plan_of(const st_model *m, st_dtype low)
{
    st_net_config cfg = {.batch = 2, .backend = ST_BACKEND_REFERENCE, .precision = low, .plan_only = true};
    st_net *n = NULL;
    assert_int_equal(st_net_create(&n, m, &cfg), ST_OK);
    return n;
}

static int first_of(const st_net *n, node_kind kind)
{
    for (int j = 1; j < n->nx; j++)
        if (n->x[j].kind == kind)
            return j;
    fail_msg("no %s in the net", node_kind_name(kind));
    return -1;
}

/* A backend that has no attention kernel in the low type: everything else
 * as the reference. */
static bool all_but_attention(const st_net *n, const struct xnode *x, st_dtype type)
{
    (void)n, (void)type;
    return x->kind != NODE_ATTENTION;
}

static void test_the_rules_ask_the_backend(void **state)
{
    (void)state;
    st_model *m = parse(st_model_preset_text("gpt-mini"));
    for (st_dtype low = ST_DTYPE_BF16; low != ST_DTYPE_F32; low = low == ST_DTYPE_BF16 ? ST_DTYPE_F16 : ST_DTYPE_F32) {
        st_net *n = plan_of(m, low);
        const int att = first_of(n, NODE_ATTENTION), qkv = n->x[att].in;
        assert_int_equal(n->x[att].compute, low);
        assert_int_equal(n->x[qkv].stored, low);  /* the attention takes it low */
        const struct nn_backend *own = n->backend;
        struct nn_backend asked = *own;
        asked.computes = all_but_attention;
        n->backend = &asked;
        nn_assign_roles(n);
        nn_plan_precision(n);
        assert_int_equal(n->x[att].compute, ST_DTYPE_F32);
        assert_int_equal(n->x[att].stored, ST_DTYPE_F32);
        assert_int_equal(n->x[qkv].compute, low);          /* the linear layer still computes low */
        assert_int_equal(n->x[qkv].stored, ST_DTYPE_F32);  /* for a consumer that takes fp32 */
        n->backend = own;
        st_net_destroy(n);
    }
    st_model_destroy(m);
}

/* The first MLP linear layer falls back: it computes and keeps fp32, the
 * GELU that carries its output carries fp32, and every edge before it is
 * as planned (those nodes are built). */
static void test_a_fallback_is_planned_from_its_layer(void **state)
{
    (void)state;
    st_model *m = parse(st_model_preset_text("gpt-mini"));
    st_net *n = plan_of(m, ST_DTYPE_BF16);
    const int gelu = first_of(n, NODE_GELU), fc = n->x[gelu].in;
    assert_int_equal(n->x[fc].compute, ST_DTYPE_BF16);
    assert_int_equal(n->x[gelu].stored, ST_DTYPE_BF16);
    st_dtype before[512][2];
    assert_true(n->nx <= 512);
    for (int j = 0; j < n->nx; j++)
        before[j][0] = n->x[j].compute, before[j][1] = n->x[j].stored;
    nn_plan_fallback(n, fc);
    assert_int_equal(n->x[fc].compute, ST_DTYPE_F32);
    assert_int_equal(n->x[fc].stored, ST_DTYPE_F32);
    assert_int_equal(n->x[gelu].compute, ST_DTYPE_F32);
    assert_int_equal(n->x[gelu].stored, ST_DTYPE_F32);
    for (int j = 0; j < fc; j++) {
        assert_int_equal(n->x[j].compute, before[j][0]);
        assert_int_equal(n->x[j].stored, before[j][1]);
    }
    /* the next block's layers compute low again */
    assert_int_equal(n->x[first_of(n, NODE_HEAD)].compute, ST_DTYPE_BF16);
    st_net_destroy(n);
    st_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_rules_ask_the_backend),
        cmocka_unit_test(test_a_fallback_is_planned_from_its_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
