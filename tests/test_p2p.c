/* Point-to-point messages (st_send, st_recv) at 2, 3, 4, 8 and 16 forked
 * ranks (16: oversubscribed on small machines): every length from empty
 * to several rings long, every ordered pair at once, each peer's sends
 * from a thread of its own while the rank's main thread runs an
 * all-reduce and then receives (the concurrency the torch backend uses);
 * every byte checked, the counters exact.  A receive of another length or
 * tag refused with the message kept; st_p2p_ready's room and arrivals; a dead peer found from both sides; a
 * waiting receive cancelled; bad arguments refused. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkranks.h"

#define RING (16u << 10)

/* Lengths around the header, a piece (a quarter ring) and the ring, and one
 * that streams through it three and a half times. */
static const size_t lengths[] = {0, 1, 15, 4096 + 7, RING - 16, RING, RING + 1, RING * 7 / 2 + 3};
#define NLENGTHS (sizeof lengths / sizeof *lengths)

static unsigned char byte_of(int from, int to, size_t k, size_t i)
{
    return (unsigned char)(from * 131 + to * 31 + k * 7 + i * 13 + (i >> 8));
}

struct sender {
    st_group *g;
    int rank, peer;
    st_status st;
};

static void *send_all(void *arg)
{
    struct sender *s = arg;
    unsigned char *buf = malloc(lengths[NLENGTHS - 1]);
    s->st = buf ? ST_OK : ST_ERR_NOMEM;
    for (size_t k = 0; k < NLENGTHS && s->st == ST_OK; k++) {
        for (size_t i = 0; i < lengths[k]; i++)
            buf[i] = byte_of(s->rank, s->peer, k, i);
        s->st = st_send(s->g, s->peer, (int)k, lengths[k] ? buf : NULL, lengths[k]);
    }
    free(buf);
    return NULL;
}

/* Every message from `peer`, in order, each byte checked. */
static int receive_all(st_group *g, int rank, int peer, unsigned char *buf)
{
    for (size_t k = 0; k < NLENGTHS; k++) {
        memset(buf, 0xEE, lengths[k] + 1);
        CHILD_CHECK(st_recv(g, peer, (int)k, lengths[k] ? buf : NULL, lengths[k]) == ST_OK);
        for (size_t i = 0; i < lengths[k]; i++)
            CHILD_CHECK(buf[i] == byte_of(peer, rank, k, i));
        CHILD_CHECK(buf[lengths[k]] == 0xEE);
    }
    return 0;
}

static int every_pair(st_group *g, int rank, void *arg)
{
    (void)arg;
    const int world = st_group_size(g);
    struct sender *s = calloc((size_t)world, sizeof *s);
    pthread_t *t = calloc((size_t)world, sizeof *t);
    unsigned char *buf = malloc(lengths[NLENGTHS - 1] + 1);
    CHILD_CHECK(s && t && buf);
    for (int q = 0; q < world; q++)
        if (q != rank) {
            s[q] = (struct sender){g, rank, q, ST_OK};
            CHILD_CHECK(pthread_create(&t[q], NULL, send_all, &s[q]) == 0);
        }
    float x = (float)rank;  /* a collective while the senders run */
    CHILD_CHECK(st_allreduce(g, &x, 1, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == ST_OK);
    CHILD_CHECK(x == (float)(world * (world - 1) / 2));
    for (int k = 1; k < world; k++)
        CHILD_CHECK(receive_all(g, rank, (rank + k) % world, buf) == 0);
    size_t total = 0;
    for (size_t k = 0; k < NLENGTHS; k++)
        total += lengths[k];
    for (int q = 0; q < world; q++)
        if (q != rank) {
            CHILD_CHECK(pthread_join(t[q], NULL) == 0);
            CHILD_CHECK(s[q].st == ST_OK);
        }
    st_coll_counters c;
    st_group_counters(g, &c);
    CHILD_CHECK(c.p2p_sent == (uint64_t)(world - 1) * NLENGTHS && c.p2p_received == c.p2p_sent);
    CHILD_CHECK(c.p2p_sent_bytes == (uint64_t)(world - 1) * total && c.p2p_received_bytes == c.p2p_sent_bytes);
    free(s), free(t), free(buf);
    return 0;
}

static void test_every_pair_every_length(void **state)
{
    (void)state;
    const int worlds[] = {2, 3, 4, 8, 16};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        char job[64];
        test_job_id(job, sizeof job, "p2p");
        st_group_config cfg = {.job_id = job, .staging_bytes = 16u << 10, .p2p_bytes = RING};
        assert_int_equal(run_ranks(worlds[w], &cfg, every_pair, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

/* The default ring (256 KiB at 2 ranks): a message of 1 MiB + 1 each way. */
static int both_ways(st_group *g, int rank, void *arg)
{
    (void)arg;
    const size_t n = (1u << 20) + 1;
    unsigned char *out = malloc(n), *in = malloc(n);
    CHILD_CHECK(out && in);
    for (size_t i = 0; i < n; i++)
        out[i] = byte_of(rank, 1 - rank, 0, i);
    if (rank == 1) {  /* a header there (another length: "ready", refused at once) but not the whole message */
        while (!st_p2p_ready(g, 0, false, 0))
            usleep(100);
        CHILD_CHECK(!st_p2p_ready(g, 0, false, n));
    }
    /* rank 0 sends first, rank 1 receives first: a blocking pair as MPI's users write it */
    for (int turn = 0; turn < 2; turn++)
        CHILD_CHECK((turn == rank ? st_send(g, 1 - rank, 9, out, n) : st_recv(g, 1 - rank, 9, in, n)) == ST_OK);
    for (size_t i = 0; i < n; i++)
        CHILD_CHECK(in[i] == byte_of(1 - rank, rank, 0, i));
    free(out), free(in);
    return 0;
}

static void test_default_ring_both_ways(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "p2p-both");
    st_group_config cfg = {.job_id = job};
    assert_int_equal(run_ranks(2, &cfg, both_ways, NULL), 0);
    assert_int_equal(leftover_segments(job), 0);
}

/* A receive of another length, then of another tag: refused by name, and
 * the message still there for the right one. */
static int mismatched(st_group *g, int rank, void *arg)
{
    (void)arg;
    char msg[16] = "fifteen bytes..";
    const size_t ring = 256u << 10, header = 16;  /* the default ring at 2 ranks */
    if (rank == 0) {  /* st_p2p_ready: room for a message and its header, and no more */
        CHILD_CHECK(st_p2p_ready(g, 1, true, ring - header) && !st_p2p_ready(g, 1, true, ring - header + 1));
        CHILD_CHECK(st_barrier(g) == ST_OK);
        CHILD_CHECK(st_send(g, 1, 3, msg, sizeof msg) == ST_OK);
        CHILD_CHECK(st_p2p_ready(g, 1, true, ring - 3 * header) && !st_p2p_ready(g, 1, true, ring - 3 * header + 1));
        CHILD_CHECK(st_barrier(g) == ST_OK);
        return 0;
    }
    CHILD_CHECK(!st_p2p_ready(g, 0, false, 16));  /* nothing there yet */
    CHILD_CHECK(st_barrier(g) == ST_OK && st_barrier(g) == ST_OK);
    CHILD_CHECK(st_p2p_ready(g, 0, false, 16) && st_p2p_ready(g, 0, false, 17));  /* 17: refused at once */
    char got[17] = {0};
    CHILD_CHECK(st_recv(g, 0, 3, got, 17) == ST_ERR_MISMATCH);
    CHILD_CHECK(strstr(st_last_error(), "rank 1 expects 17 bytes with tag 3 from rank 0, whose next message is "
                                        "16 bytes with tag 3") != NULL);
    CHILD_CHECK(st_recv(g, 0, 4, got, 16) == ST_ERR_MISMATCH);
    CHILD_CHECK(strstr(st_last_error(), "16 bytes with tag 4") && strstr(st_last_error(), "16 bytes with tag 3"));
    CHILD_CHECK(st_recv(g, 0, 3, got, 16) == ST_OK && memcmp(got, msg, 16) == 0);
    return 0;
}

static void test_mismatch_keeps_the_message(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "p2p-mismatch");
    st_group_config cfg = {.job_id = job};
    assert_int_equal(run_ranks(2, &cfg, mismatched, NULL), 0);
}

/* Rank 0 leaves without sending (its receiver waits) or receiving (its
 * sender has filled the ring): both find it dead, well within the timeout. */
static int deserted(st_group *g, int rank, void *arg)
{
    (void)arg;
    if (rank == 0)
        return 0;
    char byte;
    double t0 = mono_now();
    CHILD_CHECK(st_recv(g, 0, 0, &byte, 1) == ST_ERR_PEER_DEAD);
    CHILD_CHECK(strstr(st_last_error(), "receive from rank 0") != NULL);
    const size_t n = 4 * RING;
    char *big = calloc(1, n);
    CHILD_CHECK(big && st_send(g, 0, 0, big, n) == ST_ERR_PEER_DEAD);
    CHILD_CHECK(strstr(st_last_error(), "send to rank 0") != NULL);
    CHILD_CHECK(mono_now() - t0 < 10.0);
    free(big);
    return 0;
}

static void test_dead_peer_found(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "p2p-dead");
    st_group_config cfg = {.job_id = job, .p2p_bytes = RING, .timeout_s = 60};
    assert_int_equal(run_ranks(2, &cfg, deserted, NULL), 0);
    assert_int_equal(leftover_segments(job), 0);
}

/* st_p2p_cancel: a receive blocked in another thread gives up; a message
 * already in the inbox is still received. */
struct blocked {
    st_group *g;
    st_status st;
};

static void *receive_nothing(void *arg)
{
    struct blocked *b = arg;
    char byte;
    b->st = st_recv(b->g, 0, 0, &byte, 1);
    if (b->st == ST_ERR_INTERRUPTED && !strstr(st_last_error(), "receive from rank 0: abandoned"))
        b->st = ST_ERR_INVALID;  /* the message (thread-local) names the call */
    return NULL;
}

static int cancelled(st_group *g, int rank, void *arg)
{
    (void)arg;
    char word[8] = "a word.";
    if (rank == 0) {  /* sends once rank 1's wait was cancelled */
        CHILD_CHECK(st_barrier(g) == ST_OK);
        CHILD_CHECK(st_send(g, 1, 0, word, sizeof word) == ST_OK);
        CHILD_CHECK(st_barrier(g) == ST_OK);
        return 0;
    }
    struct blocked b = {g, ST_OK};
    pthread_t t;
    CHILD_CHECK(pthread_create(&t, NULL, receive_nothing, &b) == 0);
    usleep(100 * 1000);
    st_p2p_cancel(g);
    CHILD_CHECK(pthread_join(t, NULL) == 0);
    CHILD_CHECK(b.st == ST_ERR_INTERRUPTED);
    CHILD_CHECK(st_barrier(g) == ST_OK && st_barrier(g) == ST_OK);  /* the word is in the inbox */
    char got[8] = {0};
    CHILD_CHECK(st_recv(g, 0, 0, got, sizeof got) == ST_OK && memcmp(got, word, sizeof got) == 0);
    return 0;
}

static void test_cancel(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "p2p-cancel");
    st_group_config cfg = {.job_id = job, .timeout_s = 60};
    assert_int_equal(run_ranks(2, &cfg, cancelled, NULL), 0);
}

static int bad_arguments(st_group *g, int rank, void *arg)
{
    (void)arg;
    char b = 0;
    CHILD_CHECK(st_send(g, rank, 0, &b, 1) == ST_ERR_INVALID);
    CHILD_CHECK(strstr(st_last_error(), "is not another rank") != NULL);
    CHILD_CHECK(st_recv(g, 2, 0, &b, 1) == ST_ERR_INVALID);
    CHILD_CHECK(st_recv(g, -1, 0, &b, 1) == ST_ERR_INVALID);
    CHILD_CHECK(st_send(g, 1 - rank, 0, NULL, 1) == ST_ERR_INVALID);
    CHILD_CHECK(st_send(NULL, 1 - rank, 0, &b, 1) == ST_ERR_INVALID);
    st_coll_counters c;
    st_group_counters(g, &c);
    CHILD_CHECK(c.p2p_sent == 0 && c.p2p_received == 0);
    return 0;
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "p2p-bad");
    st_group_config cfg = {.job_id = job};
    assert_int_equal(run_ranks(2, &cfg, bad_arguments, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_pair_every_length),
        cmocka_unit_test(test_default_ring_both_ways),
        cmocka_unit_test(test_mismatch_keeps_the_message),
        cmocka_unit_test(test_dead_peer_found),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
