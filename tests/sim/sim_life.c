/* sim_life.c: the worker's own step (step.c, over batch.c, guard.c, txn.c, outbox.c, settle.c,
 * life.c) wired to the simulator's fake ports and database, as worker.c wires it to mq.c and db.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "delivery.h"
#include "guard.h"
#include "life.h"
#include "metrics.h"
#include "pubround.h"
#include "slot.h"
#include "copies.h"
#include "settle.h"
#include "sim.h"
#include "step.h"

/* One worker process's modules (worker_t's life, batch, settle, guard and step). */
typedef struct sim_worker {
    life_t life;
    batch_t bt;
    settle_t st;
    guard_t guard;
    step_t step;
    order_batch_t ord;        /* an ordered queue's batch keys (order_batch.c), as worker_t's */
    int unsettled[SIM_BATCH]; /* committed by its last transaction, not settled yet */
    int n_unsettled;
    const char *ids[SIM_BATCH + 1];
    size_t id_lens[SIM_BATCH + 1];
} sim_worker_t;

static sim_worker_t workers[SIM_WORKERS];
conf_queue_t sim_q; /* the queue's settings, the same for every worker */
copies_keys_t sim_keys;
static int delays[1] = {1000};

static const port_consume_t consume = {&sim_consume_ops, NULL};
static const port_publish_t pub = {&sim_publish_ops, NULL};
static const port_clock_t clock_port = {&sim_clock_ops, NULL};

/* ---------- the guard's database (guard_ops_t) ---------- */

static int g_id(const char *id, size_t len)
{
    (void)len;
    return atoi(id + 1);
}

static int g_find(void *ctx, const char *id, size_t len, bool *found)
{
    (void)ctx;
    return sim_db_find(g_id(id, len), found) == 0 ? 0 : -1;
}

static long long g_bump(void *ctx, const char *id, size_t len, long long *crashes)
{
    (void)ctx;
    return sim_db_bump(g_id(id, len), crashes);
}

static long long g_crash(void *ctx, const char *id, size_t len, bool add_start)
{
    (void)ctx;
    return sim_db_crash(g_id(id, len), add_start);
}

static int g_unstart(void *ctx, const char *id, size_t len)
{
    (void)ctx;
    return sim_db_unstart(g_id(id, len)) == 0 ? 0 : -1;
}

static const guard_ops_t sim_guard_ops = {g_find, g_bump, g_crash, g_unstart};

/* ---------- the worker ---------- */

/* The process's concerns around the step (worker.c's hooks): its predecessor's crash note, and
 * the bookkeeping after each transaction. */
static bool h_note(void *ctx, guard_note_t *note)
{
    (void)ctx;
    const worker_slot_t *sl = sim_sup_slot(sim.cur);
    if (!sim_slot_pending_start())
        return false;
    *note = (guard_note_t){.in_handler = sl->in_handler != 0,
                           .counted = sl->crash_counted != 0,
                           .id = sl->crash_id,
                           .id_len = sl->crash_id_len,
                           .consumer = sim_q.consumer,
                           .exit_signal = sl->exit_signal};
    return true;
}

static void h_noted(void *ctx)
{
    (void)ctx;
    sim_sup_slot(sim.cur)->in_handler = 0;
    sim_slot_started();
}

static void h_transacted(void *ctx, const txn_t *t, txn_status_t st)
{
    sim_worker_t *x = &workers[sim.cur];
    (void)ctx;
    if (st != TXN_DONE)
        return;
    sim_after_txn(t->m, t->n);
    for (int i = 0; i < t->n && x->n_unsettled < SIM_BATCH; i++)
        if (t->m[i].state == TXN_COMMITTED)
            x->unsettled[x->n_unsettled++] = sim_id_of(&t->m[i]);
}

static void h_settled(void *ctx)
{
    (void)ctx;
    workers[sim.cur].n_unsettled = 0;
}

/* An ordered queue: the batch's keys and running order, as worker_order_keys finds them. */
static const int *h_order_keys(void *ctx)
{
    (void)ctx;
    order_batch_keys(&workers[sim.cur].ord);
    return order_batch_seq(&workers[sim.cur].ord);
}

static const step_hooks_t hooks = {
    .note = h_note,
    .noted = h_noted,
    .transacted = h_transacted,
    .settled = h_settled,
};

static const step_hooks_t hooks_ordered = {
    .note = h_note,
    .noted = h_noted,
    .order_keys = h_order_keys,
    .transacted = h_transacted,
    .settled = h_settled,
};

order_batch_t *sim_life_order(void)
{
    return &workers[sim.cur].ord;
}

/* Wire the modules for a new process of worker k (worker_wire). */
static void life_wire(int k)
{
    sim_worker_t *x = &workers[k];
    x->guard = (guard_t){.ops = &sim_guard_ops,
                         .ctx = NULL,
                         .max_attempts = sim_q.max_attempts,
                         .dedup_table = !sim.o.dedup_none,
                         .workers = sim.o.racing / sim.o.instances}; /* its instance's */
    memset(&x->bt, 0, sizeof(x->bt));
    x->bt.q = &sim_q;
    x->bt.consume = consume;
    x->bt.clock = clock_port;
    x->bt.life = &x->life;
    x->bt.batch_max = sim.o.batch_size;
    x->bt.keys = &sim_keys;
    x->bt.returns_guard = sim.o.quorum && sim.o.rmq4 && sim.o.has_dlq;
    x->st = (settle_t){.q = &sim_q,
                       .handler = "sim",
                       .consume = consume,
                       .pub = pub,
                       .clock = clock_port,
                       .guard = &x->guard,
                       .key = sim_keys.k[0],
                       .c = &sim_sup_slot(k)->c, /* the slot's counters, as a worker's */
                       .heartbeat = SIM_HEARTBEAT_S,
                       .life = &x->life};
    x->n_unsettled = 0;
    x->step = (step_t){.life = &x->life,
                       .bt = &x->bt,
                       .st = &x->st,
                       .guard = &x->guard,
                       .txn_ops = sim.o.ordered ? &sim_txn_ops_ordered : &sim_txn_ops,
                       .txn_ctx = NULL,
                       .record = !sim.o.dedup_none,
                       .bulk = sim.o.bulk && !sim.o.ordered, /* as worker_txn_wire */
                       .batch = sim.o.batch_handler && !sim.o.ordered,
                       .limit_ms = step_limit_ms(SIM_HEARTBEAT_S),
                       .outbox = sim_outbox(),
                       .pub = pub,
                       .clock = clock_port,
                       .ids = x->ids,
                       .id_lens = x->id_lens,
                       .hooks = sim.o.ordered ? &hooks_ordered : &hooks,
                       .hooks_ctx = NULL};
}

void sim_life_begin(void)
{
    memset(&sim_q, 0, sizeof(sim_q));
    sim_q.name = "orders";
    sim_q.consumer = "orders";
    sim_q.prefetch = sim.o.prefetch;
    /* As the supervisor reads it: its instance's workers, or workers = "auto". */
    sim_q.workers = sim.o.autoscale ? CONF_WORKERS_AUTO : sim.o.racing / sim.o.instances;
    sim_q.workers_min = sim.o.as_min;
    sim_q.workers_max = sim.o.as_max;
    sim_q.dedup = sim.o.dedup_none ? CONF_DEDUP_NONE : CONF_DEDUP_TABLE;
    sim_q.batch_size = sim.o.batch_size;
    sim_q.batch_handler = sim.o.batch_handler;
    sim_q.max_body_bytes = 1 << 20;
    sim_q.max_batch_bytes = 16 << 20;
    sim_q.max_attempts = sim.o.max_attempts;
    sim_q.retry_delays_ms = delays;
    sim_q.n_retry_delays = 1;
    sim_q.handler_timeout = sim.o.handler_timeout_ms / 1000;
    sim_q.quorum = sim.o.quorum;
    sim_q.dead_letter_queue = sim.o.has_dlq ? "orders.dlq" : NULL;
    sim_q.order_key = sim.o.ordered ? "header:k" : NULL;
    sim_q.order_dead_letter = CONF_ORDER_DL_RELEASE;
    memset(&sim_keys, 0, sizeof(sim_keys));
    sim_keys.n = 1;
    for (int i = 0; i < COPIES_KEY_LEN; i++)
        sim_keys.k[0][i] = (unsigned char)sim_rng_next(&sim.rng);
    for (int k = 0; k < sim.o.workers; k++) {
        workers[k].ord = (order_batch_t){
            .ops = &sim_order_db_ops, .ctx = NULL, .q = &sim_q, .life = &workers[k].life};
        if (life_init(&workers[k].life, sim.o.batch_size, sim.o.max_held) != 0 ||
            (sim.o.ordered && order_batch_init(&workers[k].ord, sim.o.batch_size) != 0)) {
            fprintf(stderr, "sim: out of memory\n");
            abort();
        }
        life_wire(k);
    }
    /* The publisher's messages carry their properties. */
    for (int i = 0; i < sim_mq.qn[SQ_MAIN]; i++)
        sim_props_original(&sim_mq.q[SQ_MAIN][i]);
}

void sim_life_end(void)
{
    for (int k = 0; k < sim.o.workers; k++) {
        life_release(&workers[k].life);
        life_free(&workers[k].life);
        order_batch_free(&workers[k].ord);
    }
}

void sim_life_die(void)
{
    life_release(&workers[sim.cur].life);
    life_wire(sim.cur);
}

void sim_life_exit(void)
{
    sim_life_die(); /* what it still holds goes back unacked, as at any exit */
}

int sim_life_unsettled(int *ids, int max)
{
    const sim_worker_t *x = &workers[sim.cur];
    int n = 0;
    for (int i = 0; i < x->n_unsettled && n < max; i++)
        ids[n++] = x->unsettled[i];
    return n;
}

int sim_life_batch_ids(int *ids, int max)
{
    const life_t *l = &workers[sim.cur].life;
    int n = 0;
    for (int i = 0; i < l->batch.n && n < max; i++)
        if (l->batch.m[i].state != LIFE_FREE && l->batch.m[i].state != LIFE_GONE)
            ids[n++] = atoi(l->batch.t[i].id + 1);
    return n;
}

int sim_life_held(int k)
{
    return workers[k].life.held.n;
}

int sim_life_batch_n(int k)
{
    return workers[k].life.batch.n;
}

bool sim_life_idle(int k)
{
    const sim_worker_t *x = &workers[k];
    return x->life.batch.n == 0 && x->life.held.n == 0 && !x->bt.has_carry;
}

uint64_t sim_life_held_next_ms(int k)
{
    return workers[k].st.held_next_ms;
}

void sim_life_published(void)
{
    workers[sim.cur].step.outbox_used = true;
}

bool sim_life_step(void)
{
    sim_worker_t *x = &workers[sim.cur];
    /* Retiring (SIGTERM from the autoscaler): the daemon's drain, WORKER_DRAIN_MS at most. */
    if (sim.retiring[sim.cur] && !sim.note_only[sim.cur] && !sim.bug.retire_kill &&
        !step_drain(&x->step, SIM_DRAIN_MS, NULL, NULL)) {
        sim_retired();
        return false;
    }
    step_status_t st = step_run(&x->step);
    sim.note_only[sim.cur] = false; /* its first step counted the note: it drains from now on */
    /* --bug retire_kill: no drain; a SIGKILL that has not landed on a statement yet lands
     * between steps. */
    if (sim.retiring[sim.cur] && sim.bug.retire_kill && st == STEP_IDLE) {
        sim.kill_in[sim.cur] = 1;
        sim_maybe_die("between steps");
    }
    if (st < 0)
        sim_die(0, x->step.why);
    if (st == STEP_IDLE) {
        sim_relay(); /* worker_sweep, a chore between steps: every due row */
        return x->life.held.n > 0;
    }
    return true;
}
