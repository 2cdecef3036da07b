/* test_life.c: unit tests of a delivery's life past COMMIT (life.c): the one mover's transitions,
 * the held list it moves deliveries onto, prune and release.
 *
 * The table of allowed moves is written out here again, from docs/lifecycle.md, and every pair
 * of states is tried: an allowed move lands, any other aborts the process (tried in a child).
 * Envelopes carry real allocations, so a sanitizer build (SANITIZE=1) sees a double free or a
 * leak in prune and release.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "life.h"
#include "log.h"
#include "tap.h"

#define B(s) (1u << (s))

/* docs/lifecycle.md, "Transitions": to[from] has bit to set. */
static const unsigned t_allowed[LIFE_N_STATES] = {
    [LIFE_FREE] = B(LIFE_BATCH),
    [LIFE_BATCH] = B(LIFE_ACK) | B(LIFE_NACK) | B(LIFE_COPY) | B(LIFE_DEFERRED) | B(LIFE_RELEASED),
    [LIFE_DEFERRED] = B(LIFE_BATCH) | B(LIFE_RELEASED),
    [LIFE_ACK] = B(LIFE_SETTLED) | B(LIFE_RELEASED),
    [LIFE_NACK] = B(LIFE_SETTLED) | B(LIFE_RELEASED),
    [LIFE_COPY] = B(LIFE_COPYING) | B(LIFE_REFUSED) | B(LIFE_RELEASED),
    [LIFE_COPYING] = B(LIFE_COPIED) | B(LIFE_REFUSED) | B(LIFE_RELEASED),
    [LIFE_COPIED] = B(LIFE_SETTLED) | B(LIFE_RELEASED),
    [LIFE_REFUSED] = B(LIFE_HELD) | B(LIFE_REQUEUED) | B(LIFE_RELEASED),
    [LIFE_HELD] = B(LIFE_COPYING) | B(LIFE_REFUSED) | B(LIFE_RELEASED),
    [LIFE_GONE] = B(LIFE_FREE),
    [LIFE_SETTLED] = B(LIFE_FREE),
    [LIFE_REQUEUED] = B(LIFE_FREE),
    [LIFE_RELEASED] = B(LIFE_FREE),
};

/* Put a delivery with tag (and a body of its own) at index i of list, in state s. */
static void t_put(life_list_t *list, int i, uint64_t tag, life_state_t s)
{
    char body[32];
    life_msg_t *m = &list->m[i];
    memset(m, 0, sizeof(*m));
    memset(&list->t[i], 0, sizeof(list->t[i]));
    snprintf(body, sizeof(body), "body %llu", (unsigned long long)tag);
    m->env.delivery_tag = tag;
    m->env.message.body = amqp_bytes_malloc_dup(amqp_cstring_bytes(body));
    m->copy_index = -1;
    m->state = s;
    snprintf(list->t[i].id, sizeof(list->t[i].id), "id-%llu", (unsigned long long)tag);
    list->t[i].id_len = strlen(list->t[i].id);
}

/* A life with batch capacity 4 and held capacity held_cap; dies when out of memory. */
static void t_life(life_t *l, int held_cap)
{
    if (life_init(l, 4, held_cap) != 0) {
        printf("Bail out! life_init failed\n");
        exit(1);
    }
}

/* Destroy the envelopes left in l (whatever their state) and free it. */
static void t_free(life_t *l)
{
    life_release(l);
    life_free(l);
}

/*
 * Move a batch entry from state from to to in a child process: 1 when the
 * move returned (true or false), 0 when the child aborted, -1 otherwise.
 */
static int t_try_in_child(life_state_t from, life_state_t to)
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, STDERR_FILENO); /* the mover's "no transition" line */
        life_t l;
        t_life(&l, 2);
        t_put(&l.batch, 0, 1, from);
        l.batch.n = 1;
        (void)life_move(&l, &l.batch, 0, to);
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)
        return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : -1;
}

/* Every pair of states: allowed moves land where they say, the others abort. */
static void t_table(void)
{
    int landed = 0, refused = 0, wrong = 0;

    for (int from = 0; from < LIFE_N_STATES; from++) {
        for (int to = 0; to < LIFE_N_STATES; to++) {
            bool allowed = t_allowed[from] & B(to);
            if (!allowed) {
                if (t_try_in_child((life_state_t)from, (life_state_t)to) == 0) {
                    refused++;
                } else {
                    wrong++;
                    diag("%s -> %s did not abort", life_state_name((life_state_t)from),
                         life_state_name((life_state_t)to));
                }
                continue;
            }
            life_t l;
            t_life(&l, 2);
            t_put(&l.batch, 0, 7, (life_state_t)from);
            l.batch.n = 1;
            bool r = life_move(&l, &l.batch, 0, (life_state_t)to);
            /* Into HELD, a batch entry lands on the held list and its slot is GONE. */
            bool where = to == LIFE_HELD ? l.batch.m[0].state == LIFE_GONE && l.held.n == 1 &&
                                               l.held.m[0].state == LIFE_HELD
                                         : l.batch.m[0].state == (life_state_t)to;
            if (r && where && l.moves[to] == 1) {
                landed++;
            } else {
                wrong++;
                diag("%s -> %s: returned %d, now %s", life_state_name((life_state_t)from),
                     life_state_name((life_state_t)to), r, life_state_name(l.batch.m[0].state));
            }
            if (to == LIFE_FREE || to == LIFE_GONE)
                amqp_destroy_envelope(&l.batch.m[0].env); /* nobody owns it any more */
            t_free(&l);
        }
    }
    is_int(landed, 30, "every allowed move of the documented table lands (30 moves)");
    is_int(refused, LIFE_N_STATES * LIFE_N_STATES - 30,
           "every move not in the table aborts the worker (%d pairs)",
           LIFE_N_STATES * LIFE_N_STATES - 30);
    is_int(wrong, 0, "no move does anything else");
}

/* A batch entry moved to HELD: copied onto the held list, which owns it; the slot is GONE. */
static void t_to_held(void)
{
    life_t l;
    t_life(&l, 2);
    t_put(&l.batch, 0, 10, LIFE_ACK);
    t_put(&l.batch, 1, 11, LIFE_REFUSED);
    l.batch.n = 2;
    l.batch.m[1].route = TXN_ROUTE_DELAY;
    l.batch.m[1].copy_index = 3;
    void *body = l.batch.m[1].env.message.body.bytes;

    ok(life_move(&l, &l.batch, 1, LIFE_HELD), "a refused batch entry moves to HELD");
    is_int(l.batch.m[1].state, LIFE_GONE, "its batch slot is GONE");
    is_int(l.held.n, 1, "the held list has it");
    is_int((long long)l.held.m[0].env.delivery_tag, 11, "with its delivery tag");
    ok(l.held.m[0].env.message.body.bytes == body, "and its envelope (now the held list's)");
    is_str(l.held.t[0].id, "id-11", "and its protocol half (txn_msg_t)");
    is_int(l.held.m[0].route, TXN_ROUTE_DELAY, "its route is kept");
    is_int(l.held.m[0].copy_index, -1, "no copy in a round yet");
    is_int((long long)l.moves[LIFE_HELD], 1, "HELD entered once");
    is_int((long long)l.moves[LIFE_GONE], 1, "GONE entered once");
    ok(!life_unsettled(l.batch.m[1].state), "a GONE slot needs nothing from the broker");
    ok(life_unsettled(l.held.m[0].state), "a HELD delivery still needs its ack");

    /* On the held list the delivery moves in place. */
    l.held.m[0].copy_index = 5;
    ok(life_move(&l, &l.held, 0, LIFE_COPYING), "HELD -> COPYING in place (the timer)");
    is_int(l.held.m[0].copy_index, 5, "COPYING keeps its copy_index");
    ok(life_move(&l, &l.held, 0, LIFE_REFUSED), "COPYING -> REFUSED in place");
    is_int(l.held.m[0].copy_index, -1, "leaving COPYING forgets the copy_index");
    ok(life_move(&l, &l.held, 0, LIFE_HELD), "REFUSED -> HELD on the held list stays in place");
    is_int(l.held.n, 1, "the held list still has one");
    is_int(l.held.m[0].state, LIFE_HELD, "held again");

    ok(life_move(&l, &l.batch, 1, LIFE_FREE), "the GONE slot is freed");
    t_free(&l); /* destroys tag 10's envelope (batch) and tag 11's (held) once each */
}

/* The held list full: false, and nothing moved. */
static void t_held_full(void)
{
    life_t l;
    t_life(&l, 2);
    for (int i = 0; i < 3; i++)
        t_put(&l.batch, i, (uint64_t)(20 + i), LIFE_REFUSED);
    l.batch.n = 3;
    ok(life_move(&l, &l.batch, 0, LIFE_HELD) && life_move(&l, &l.batch, 1, LIFE_HELD),
       "two refused entries fill a held list of 2");
    uint64_t moves[LIFE_N_STATES];
    memcpy(moves, l.moves, sizeof(moves));
    life_msg_t before = l.batch.m[2];
    ok(!life_move(&l, &l.batch, 2, LIFE_HELD), "a third: life_move returns false");
    is_int(l.batch.m[2].state, LIFE_REFUSED, "it stays REFUSED in the batch");
    ok(memcmp(&before, &l.batch.m[2], sizeof(before)) == 0, "its entry is unchanged");
    is_int(l.held.n, 2, "the held list still has 2");
    is_int((long long)l.held.m[1].env.delivery_tag, 21, "the held list's entries are unchanged");
    ok(memcmp(moves, l.moves, sizeof(moves)) == 0, "no state was entered");
    ok(life_move(&l, &l.batch, 2, LIFE_REQUEUED), "so it goes REQUEUED (nack with requeue)");
    t_free(&l);
}

/* Prune drops the settled and released entries of the held list and keeps the order. */
static void t_prune(void)
{
    life_t l;
    t_life(&l, 5);
    static const life_state_t st[5] = {LIFE_SETTLED, LIFE_HELD, LIFE_RELEASED, LIFE_COPYING,
                                       LIFE_SETTLED};
    for (int i = 0; i < 5; i++)
        t_put(&l.held, i, (uint64_t)(30 + i), st[i]);
    l.held.n = 5;
    life_prune(&l);
    is_int(l.held.n, 2, "prune keeps the 2 unsettled of 5");
    is_int((long long)l.held.m[0].env.delivery_tag, 31, "the first kept is tag 31");
    is_int((long long)l.held.m[1].env.delivery_tag, 33, "the second kept is tag 33");
    ok(l.held.m[0].state == LIFE_HELD && l.held.m[1].state == LIFE_COPYING, "in their states");
    ok(l.held.m[2].state == LIFE_FREE && l.held.m[4].state == LIFE_FREE,
       "the places behind are FREE");
    is_str(l.held.t[1].id, "id-33", "protocol halves move with their deliveries");
    life_prune(&l);
    is_int(l.held.n, 2, "prune again: nothing to drop");
    t_free(&l);
}

/* Release gives up every unsettled delivery (batch, carry, held) and frees every slot. */
static void t_release(void)
{
    life_t l;
    t_life(&l, 3);
    t_put(&l.batch, 0, 40, LIFE_SETTLED);
    t_put(&l.batch, 1, 41, LIFE_REFUSED);
    t_put(&l.batch, 2, 42, LIFE_DEFERRED);
    t_put(&l.batch, 3, 43, LIFE_COPYING);
    l.batch.n = 4;
    ok(life_move(&l, &l.batch, 1, LIFE_HELD), "tag 41 to the held list (its slot GONE)");
    t_put(&l.held, 1, 44, LIFE_COPYING);
    l.held.n = 2;
    t_put(&l.batch, l.batch.cap, 45, LIFE_BATCH); /* the carry */
    uint64_t released = l.moves[LIFE_RELEASED];
    life_release(&l);
    /* 42, 43, 45 in the batch; 41, 44 on the held list; not 40 (settled) nor the GONE slot. */
    is_int((long long)(l.moves[LIFE_RELEASED] - released), 5, "5 unsettled deliveries RELEASED");
    ok(l.batch.n == 0 && l.held.n == 0, "batch and held list end empty");
    bool all_free = true;
    for (int i = 0; i <= l.batch.cap; i++)
        all_free &= l.batch.m[i].state == LIFE_FREE;
    for (int i = 0; i < l.held.cap; i++)
        all_free &= l.held.m[i].state == LIFE_FREE;
    ok(all_free, "every slot FREE, the carry's too");
    life_release(&l);
    ok(true, "release twice is harmless (no double free)");
    life_free(&l);
}

/* Carry and DEFERRED deliveries change place, not state. */
static void t_place(void)
{
    life_t l;
    t_life(&l, 1);
    t_put(&l.batch, l.batch.cap, 50, LIFE_BATCH);
    life_place(&l.batch, l.batch.cap, 0);
    l.batch.n = 1;
    ok(l.batch.m[0].state == LIFE_BATCH && l.batch.m[0].env.delivery_tag == 50,
       "the carry moves to the front, still BATCH");
    is_int(l.batch.m[l.batch.cap].state, LIFE_FREE, "the carry slot is FREE");
    is_str(l.batch.t[0].id, "id-50", "its protocol half moves with it");
    t_free(&l);
}

static void t_misc(void)
{
    life_t l;
    ok(life_init(&l, 0, 1) != 0 && life_init(&l, 1, 0) != 0, "life_init refuses a capacity of 0");
    int unsettled = 0;
    for (int s = 0; s < LIFE_N_STATES; s++)
        unsettled += life_unsettled((life_state_t)s);
    /* BATCH DEFERRED ACK NACK COPY COPYING COPIED REFUSED HELD */
    is_int(unsettled, 9, "9 states still need the broker");
    is_str(life_state_name(LIFE_REQUEUED), "requeued", "state names for traces");
    is_str(life_state_name(LIFE_N_STATES), "?", "an unknown state is named ?");
}

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    t_table();
    t_to_held();
    t_held_full();
    t_prune();
    t_release();
    t_place();
    t_misc();
    return done();
}
