/* The planner as a pure function, on synthetic machines: disjoint core sets,
 * NUMA honoured, counts derived as documented, bad requests named; and the
 * CPU probe (cpuprobe.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "shmtrain/cpuprobe.h"
#include "shmtrain/topo.h"

#define TWO_SOCKETS "pack:2 numa:2 l3:1 core:16 pu:2"

static st_topo *synthetic(const char *desc)
{
    st_topo *t = NULL;
    assert_int_equal(st_topo_create(&t, ST_TOPO_SYNTHETIC, desc), ST_OK);
    return t;
}

/* Every plan: PU sets pairwise disjoint, sizes as reported, ranks 0..n-1. */
static void check_disjoint(const st_plan *p)
{
    char seen[4096] = {0};
    for (int r = 0; r < p->ninstances; r++) {
        const st_plan_instance *in = &p->inst[r];
        assert_int_equal(in->rank, r);
        assert_true(in->npus >= in->ncores);
        for (int j = 0; j < in->npus; j++) {
            assert_true(in->pus[j] >= 0 && in->pus[j] < 4096);
            assert_int_equal(seen[in->pus[j]], 0);
            seen[in->pus[j]] = 1;
            if (j)
                assert_true(in->pus[j] > in->pus[j - 1]);
        }
    }
}

static st_plan *plan_ok(st_topo *t, st_plan_request req)
{
    st_plan *p = NULL;
    st_status st = st_plan_create(&p, t, &req);
    if (st != ST_OK)
        fail_msg("plan failed: %s", st_last_error());
    check_disjoint(p);
    return p;
}

static void plan_fails(st_topo *t, st_plan_request req, const char *fragment)
{
    st_plan *p = (st_plan *)0x1;
    assert_int_equal(st_plan_create(&p, t, &req), ST_ERR_INVALID);
    assert_null(p);
    if (!strstr(st_last_error(), fragment))
        fail_msg("error '%s' does not mention '%s'", st_last_error(), fragment);
}

static void test_this_machine_shape(void **state)
{
    (void)state;
    st_topo *t = synthetic("pack:1 numa:1 l3:1 core:2 pu:1");
    st_plan *p = plan_ok(t, (st_plan_request){0});
    assert_int_equal(p->ninstances, 1);  /* one NUMA node: one instance, all cores */
    assert_int_equal(p->inst[0].ncores, 2);
    assert_string_equal(p->inst[0].pu_list, "0-1");
    st_plan_destroy(p);
    p = plan_ok(t, (st_plan_request){.ninstances = 2});
    assert_int_equal(p->ninstances, 2);
    assert_string_equal(p->inst[0].pu_list, "0");
    assert_string_equal(p->inst[1].pu_list, "1");
    assert_int_equal(p->nwarnings, 0);
    st_plan_destroy(p);
    plan_fails(t, (st_plan_request){.ninstances = 3}, "--ninstances 3");
    plan_fails(t, (st_plan_request){.cores_per_instance = 3}, "--ncores-per-instance 3");
    plan_fails(t, (st_plan_request){.ninstances = 2, .cores_per_instance = 2}, "needs 4 cores");
    st_topo_destroy(t);
}

static void test_two_sockets_default_is_one_per_numa_node(void **state)
{
    (void)state;
    st_topo *t = synthetic(TWO_SOCKETS);
    st_plan *p = plan_ok(t, (st_plan_request){0});
    assert_int_equal(p->ninstances, 4);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(p->inst[r].ncores, 16);
        assert_int_equal(p->inst[r].npus, 16);  /* physical cores only */
        assert_false(p->inst[r].cross_numa);
        char node[4];
        snprintf(node, sizeof node, "%d", r);
        assert_string_equal(p->inst[r].numa_list, node);
    }
    assert_string_equal(p->inst[0].package_list, "0");
    assert_string_equal(p->inst[3].package_list, "1");
    assert_int_equal(p->nleftover, 0);
    st_plan_destroy(p);
    st_topo_destroy(t);
}

static void test_two_sockets_many_instances(void **state)
{
    (void)state;
    st_topo *t = synthetic(TWO_SOCKETS);
    st_plan *p = plan_ok(t, (st_plan_request){.ninstances = 8});
    assert_int_equal(p->ninstances, 8);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(p->inst[r].ncores, 8);
        assert_false(p->inst[r].cross_numa);
    }
    /* ring neighbours share a node: ranks 2k and 2k+1 on node k */
    assert_string_equal(p->inst[0].numa_list, p->inst[1].numa_list);
    assert_string_equal(p->inst[6].numa_list, "3");
    st_plan_destroy(p);

    p = plan_ok(t, (st_plan_request){.cores_per_instance = 12});
    assert_int_equal(p->ninstances, 4);  /* one per node fits; 4 cores left per node */
    assert_int_equal(p->nleftover, 16);
    assert_int_equal(p->nwarnings, 1);
    assert_non_null(strstr(p->warnings[0], "16 usable cores left unused"));
    st_plan_destroy(p);

    p = plan_ok(t, (st_plan_request){.ninstances = 2, .cores_per_instance = 4});
    assert_string_equal(p->inst[0].numa_list, "0");  /* spread over nodes, not piled */
    assert_string_equal(p->inst[1].numa_list, "1");
    st_plan_destroy(p);

    p = plan_ok(t, (st_plan_request){.ninstances = 64});
    assert_int_equal(p->ninstances, 64);
    st_plan_destroy(p);
    plan_fails(t, (st_plan_request){.ninstances = 65}, "--ninstances 65");
    st_topo_destroy(t);
}

static void test_cross_numa_warns_or_refuses(void **state)
{
    (void)state;
    st_topo *t = synthetic(TWO_SOCKETS);
    st_plan *p = plan_ok(t, (st_plan_request){.ninstances = 2, .cores_per_instance = 20});
    assert_true(p->inst[0].cross_numa && p->inst[1].cross_numa);
    assert_string_equal(p->inst[0].package_list, "0");  /* straddles, but within a socket */
    assert_string_equal(p->inst[1].package_list, "1");
    assert_non_null(strstr(p->warnings[0], "rank 0 spans NUMA nodes 0-1"));
    st_plan_destroy(p);
    plan_fails(t, (st_plan_request){.ninstances = 2, .cores_per_instance = 20, .refuse_cross_numa = true},
               "--no-cross-numa");
    st_topo_destroy(t);
}

static void test_logical_cores(void **state)
{
    (void)state;
    st_topo *t = synthetic(TWO_SOCKETS);
    st_plan *p = plan_ok(t, (st_plan_request){.cores_per_instance = 4, .use_logical_cores = true});
    assert_int_equal(p->ninstances, 16);
    assert_int_equal(p->inst[0].ncores, 4);
    assert_int_equal(p->inst[0].npus, 8);
    assert_string_equal(p->inst[0].pu_list, "0-7");
    st_plan_destroy(p);
    st_topo_destroy(t);
}

static void test_restricted_and_uneven(void **state)
{
    (void)state;
    st_topo *t = synthetic(TWO_SOCKETS);
    /* A container that sees 6 cores (12 PUs) plans on 6. */
    st_plan *p = plan_ok(t, (st_plan_request){.allowed_cpus = "0-11"});
    assert_int_equal(p->ninstances, 1);
    assert_int_equal(p->inst[0].ncores, 6);
    st_plan_destroy(p);
    /* A cpuset hiding SMT siblings still leaves whole cores usable. */
    p = plan_ok(t, (st_plan_request){.allowed_cpus = "0,2,4,6"});
    assert_int_equal(p->inst[0].ncores, 4);
    st_plan_destroy(p);
    st_topo_destroy(t);

    /* Uneven nodes (4 and 3 cores): one instance per node, sizes follow. */
    t = synthetic("pack:2 numa:1 core:4 pu:1");
    p = plan_ok(t, (st_plan_request){.allowed_cpus = "0-6"});
    assert_int_equal(p->ninstances, 2);
    assert_int_equal(p->inst[0].ncores, 4);
    assert_int_equal(p->inst[1].ncores, 3);
    st_plan_destroy(p);
    p = plan_ok(t, (st_plan_request){.allowed_cpus = "0-6", .cores_per_instance = 2});
    assert_int_equal(p->ninstances, 3);  /* 2 in node 0, 1 in node 1, 1 core left */
    assert_int_equal(p->nleftover, 1);
    st_plan_destroy(p);
    st_topo_destroy(t);
}

static void test_lists_and_bad_requests(void **state)
{
    (void)state;
    st_topo *t = synthetic(TWO_SOCKETS);
    st_plan *p = plan_ok(t, (st_plan_request){.node_list = "1", .ninstances = 2});
    assert_string_equal(p->inst[0].numa_list, "1");
    assert_string_equal(p->inst[1].numa_list, "1");
    st_plan_destroy(p);
    p = plan_ok(t, (st_plan_request){.cpu_list = "0-7"});
    assert_int_equal(p->inst[0].ncores, 4);
    st_plan_destroy(p);
    plan_fails(t, (st_plan_request){.node_list = "7"}, "--nodes-list '7'");
    plan_fails(t, (st_plan_request){.node_list = "x"}, "--nodes-list 'x'");
    plan_fails(t, (st_plan_request){.cpu_list = "500"}, "--cores-list '500'");
    plan_fails(t, (st_plan_request){.allowed_cpus = "0-3", .cpu_list = "8"}, "CPU 8 is not in the usable set 0-3");
    plan_fails(t, (st_plan_request){.allowed_cpus = ""}, "--allowed-cpus");
    plan_fails(t, (st_plan_request){.ninstances = -1}, "--ninstances -1");
    plan_fails(t, (st_plan_request){.bind = (st_bind)9}, "--bind");
    st_topo_destroy(t);

    st_topo *bad = (st_topo *)0x1;
    assert_int_equal(st_topo_create(&bad, ST_TOPO_SYNTHETIC, "pack:two"), ST_ERR_INVALID);
    assert_null(bad);
    assert_non_null(strstr(st_last_error(), "--synthetic 'pack:two'"));
    assert_int_equal(st_topo_create(&bad, ST_TOPO_XML, "/nonexistent.xml"), ST_ERR_IO);
    assert_non_null(strstr(st_last_error(), "--topology-xml /nonexistent.xml"));
}

static void test_bind_granularity_and_json(void **state)
{
    (void)state;
    st_topo *t = synthetic(TWO_SOCKETS);
    st_plan *p = plan_ok(t, (st_plan_request){.ninstances = 8, .bind = ST_BIND_NUMA});
    assert_string_equal(p->inst[0].bind_cpus, "0-31");  /* the whole node, SMT included */
    st_plan_destroy(p);
    p = plan_ok(t, (st_plan_request){.ninstances = 2, .bind = ST_BIND_NONE});
    assert_string_equal(p->inst[0].bind_cpus, "");
    char *json = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&json, &len);
    st_plan_write_json(p, f);
    fclose(f);
    assert_non_null(strstr(json, "\"ninstances\":2"));
    assert_non_null(strstr(json, "\"bind\":\"none\""));
    assert_non_null(strstr(json, "\"cross_numa\":true"));  /* 2 x 32 cores: a socket each */
    free(json);
    /* Binding is refused for a topology that is not this machine. */
    char warning[64];
    assert_int_equal(st_plan_bind(t, p, 0, warning, sizeof warning), ST_ERR_INVALID);
    st_plan_destroy(p);
    st_topo_destroy(t);
}

/* The CPU probe (no timing is asserted: only that it measured something on
 * the CPU it was given, refuses CPUs it cannot use with a one-line error,
 * and leaves no child behind). */
static void test_cpu_probe(void **state)
{
    (void)state;
    int cpu0[1] = {0}, none[1] = {-1}, absent[1] = {1023};
    double g[1] = {0}, one = 0, all = 0;
    assert_int_equal(st_cpu_probe(cpu0, 1, 0.01, g), ST_OK);
    assert_true(isfinite(g[0]) && g[0] > 0);
    assert_int_equal(st_cpu_probe_ratio(cpu0, 1, 0.01, 2, &one, &all), ST_OK);
    assert_true(one > 0 && all > 0);
    assert_int_equal(st_cpu_probe(none, 1, 0.01, g), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "CPU -1 does not exist"));
    assert_int_equal(st_cpu_probe(cpu0, 0, 0.01, g), ST_ERR_INVALID);
    assert_int_equal(st_cpu_probe(absent, 1, 0.01, g), ST_ERR_SYS);  /* not in this machine's affinity */
    assert_non_null(strstr(st_last_error(), "could not run on its CPU"));
    /* A child that cannot pin itself exits at once; the start signal must
     * not meet a pipe without readers (SIGPIPE would kill this process:
     * it did within 2000 tries, and once in CI).  3000 tries, the error each time. */
    for (int i = 0; i < 3000; i++)
        assert_int_equal(st_cpu_probe(absent, 1, 0.001, g), ST_ERR_SYS);
    /* Two CPUs at once, where the machine lets this test have two: each
     * answer lands in its own slot. */
    cpu_set_t set;
    int two[2], have = 0;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    for (int c = 0; c < CPU_SETSIZE && have < 2; c++)
        if (CPU_ISSET(c, &set))
            two[have++] = c;
    if (have == 2) {
        double g2[2] = {0, 0};
        assert_int_equal(st_cpu_probe(two, 2, 0.01, g2), ST_OK);
        assert_true(g2[0] > 0 && g2[1] > 0);
    }
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_this_machine_shape),
        cmocka_unit_test(test_two_sockets_default_is_one_per_numa_node),
        cmocka_unit_test(test_two_sockets_many_instances),
        cmocka_unit_test(test_cross_numa_warns_or_refuses),
        cmocka_unit_test(test_logical_cores),
        cmocka_unit_test(test_restricted_and_uneven),
        cmocka_unit_test(test_lists_and_bad_requests),
        cmocka_unit_test(test_bind_granularity_and_json),
        cmocka_unit_test(test_cpu_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
