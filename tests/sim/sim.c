/* sim.c: deterministic simulation of idemd's message life: the workers' own step (step.c, wired in
 * sim_life.c), against the simulated broker and
 * database, with deaths, faults and invariants; one seed drives everything (docs/simulation.md).
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "pubround.h"
#include "sim.h"
#include "slot.h"
#include "sup.h"

sim_t sim;

/* txn.c's test-only switch: weak, so that a txn.c without it still links. */
extern bool txn_test_no_fallback __attribute__((weak));

#define SIM_GUARD_UNCONFIRMED 10 /* worker.c WORKER_GUARD_UNCONFIRMED */
#define SIM_RETURNS_MAX 15       /* worker.c WORKER_RETURNS_MAX */
#define SIM_CHAOS_STEPS 300      /* steps with faults, then calm until drained */
#define SIM_DRAIN_STEPS 6000

void sim_log(const char *fmt, ...)
{
    va_list ap;
    if (!sim.trace)
        return;
    printf("# %6llu ms  ", (unsigned long long)sim.now_ms);
    if (sim.o.workers > 1)
        printf("[w%d] ", sim.cur);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

void sim_violation(const char *fmt, ...)
{
    va_list ap;
    if (sim.failed)
        return;
    sim.failed = true;
    va_start(ap, fmt);
    vsnprintf(sim.why, sizeof(sim.why), fmt, ap);
    va_end(ap);
    sim_log("VIOLATION: %s", sim.why);
}

bool sim_fault(unsigned pm)
{
    return !sim.calm && sim_rng_pm(&sim.rng, pm);
}

/* ---------- the worker, as worker.c runs a message's life ---------- */
/* A worker's slot is the supervisor's (sim_sup.c): its crash note survives the worker. */
static bool starting; /* a new process: its first step reads the crash note in its slot */

/* The crash note in worker k's slot: its message id, or -1 when there is none. */
static int note_id(int k)
{
    const worker_slot_t *sl = sim_sup_slot(k);
    return sl->in_handler ? atoi(sl->crash_id + 1) : -1;
}

/*
 * Several workers on one queue. The broker's queues and the database's
 * committed tables are shared; each worker has its own consuming channel
 * (unacked deliveries, tags), publishing channel, database connection (its
 * open transaction); its slot is the supervisor's. The running worker's are in sim_mq, sim_db
 * and starting; the others wait here until their turn
 * (sim_switch). A worker's turn (one pass of its loop) runs to its end, so
 * transactions never overlap: a duplicate record that would wait on
 * another's uncommitted insert sees that insert committed (it loses) or
 * rolled back (it wins).
 */
typedef struct sim_conns {
    sim_delivery_t unacked[SIM_PREFETCH];
    int n_unacked;
    uint64_t next_tag;
    bool pub_open, cancelled;
    uint64_t pub_seq;
    struct {
        int kind, id, row;
    } tw[256];
    int nw;
    struct {
        char name[8];
        int at;
    } sp[SIM_BATCH + 2];
    int nsp;
    bool dead;
    unsigned ro_err;
    bool starting;
} sim_conns_t;

static sim_conns_t conns[SIM_SLOTS];

static void conns_save(sim_conns_t *c)
{
    memcpy(c->unacked, sim_mq.unacked, (size_t)sim_mq.n_unacked * sizeof(c->unacked[0]));
    c->n_unacked = sim_mq.n_unacked;
    c->next_tag = sim_mq.next_tag;
    c->pub_open = sim_mq.pub_open;
    c->pub_seq = sim_mq.pub_seq;
    c->cancelled = sim_mq.cancelled;
    _Static_assert(sizeof(c->tw) == sizeof(sim_db.w), "sim_db.w");
    _Static_assert(sizeof(c->sp) == sizeof(sim_db.sp), "sim_db.sp");
    memcpy(c->tw, sim_db.w, (size_t)sim_db.nw * sizeof(c->tw[0])); /* only what is used */
    c->nw = sim_db.nw;
    memcpy(c->sp, sim_db.sp, (size_t)sim_db.nsp * sizeof(c->sp[0]));
    c->nsp = sim_db.nsp;
    c->dead = sim_db.dead;
    c->ro_err = sim_db.ro_err;
    c->starting = starting;
}

static void conns_load(const sim_conns_t *c)
{
    memcpy(sim_mq.unacked, c->unacked, (size_t)c->n_unacked * sizeof(c->unacked[0]));
    sim_mq.n_unacked = c->n_unacked;
    sim_mq.next_tag = c->next_tag;
    sim_mq.pub_open = c->pub_open;
    sim_mq.pub_seq = c->pub_seq;
    sim_mq.cancelled = c->cancelled;
    memcpy(sim_db.w, c->tw, (size_t)c->nw * sizeof(c->tw[0]));
    sim_db.nw = c->nw;
    memcpy(sim_db.sp, c->sp, (size_t)c->nsp * sizeof(c->sp[0]));
    sim_db.nsp = c->nsp;
    sim_db.dead = c->dead;
    sim_db.ro_err = c->ro_err;
    starting = c->starting;
}

/* Make worker k the running one: its connections into sim_mq, sim_db and the slot. */
static void sim_switch(int k)
{
    if (k == sim.cur)
        return;
    conns_save(&conns[sim.cur]);
    conns_load(&conns[k]);
    sim.cur = k;
}

int sim_instance(int k)
{
    return sim.o.instances > 1 && k >= sim.o.workers / 2;
}

/*
 * Two instances: instance i is killed as a whole (kill -9 of its
 * supervisor, or the host gone), between the workers' turns, and systemd
 * starts it again after a back-off. Its workers' deliveries go back to the
 * queue, their connections close; its slots are new shared memory, so a
 * crash note no successor counted yet is gone (the guard's starts rule
 * still bounds that message: guard.c).
 */
static void instance_kill(int inst)
{
    sim.instance_deaths++;
    for (int k = 0; k < sim.o.workers; k++) {
        if (sim_instance(k) != inst)
            continue;
        sim_switch(k);
        int note = note_id(k), sig = sim_sup_note_signal(k);
        if (sim_sup_used(k))
            sim_log("instance %d killed: worker w%d gone", inst, k);
        if (note >= 0 && (starting || !sim_sup_alive(k)) && sig != SIGKILL && sig != SIGTERM) {
            sim.truth[note].notes_gone++;
            sim_log("crash note of m%d gone with the instance's slots", note);
        }
        if (sim_sup_alive(k)) {
            sim_life_die();
            sim_mq_close_consumer();
            sim_pub_close();
            sim_db_disconnect();
        }
        sim.retiring[k] = sim.note_only[k] = false;
        sim.kill_in[k] = 0;
        starting = false;
    }
    sim_sup_kill(inst, sim.steps + 1 + (long)sim_rng_below(&sim.sched, 8));
}

int sim_other_unacked(int id)
{
    int n = 0;
    for (int k = 0; k < sim.o.workers; k++)
        for (int i = 0; k != sim.cur && i < conns[k].n_unacked; i++)
            n += conns[k].unacked[i].m.id == id;
    return n;
}

/* The end of a run: every worker's unacked deliveries back into sim_mq for sim_mq_reset. */
static void conns_free(void)
{
    for (int k = 0; k < sim.o.workers; k++)
        for (int i = 0; k != sim.cur && i < conns[k].n_unacked; i++)
            sim_bmsg_free(&conns[k].unacked[i].m);
    memset(conns, 0, sizeof(conns));
}

bool sim_slot_pending_start(void)
{
    return starting;
}

void sim_slot_started(void)
{
    starting = false;
}

void sim_started(int k)
{
    if (k == sim.cur)
        starting = true;
    else
        conns[k].starting = true;
}

static void retire_check(const char *how);

void sim_die(int sig, const char *where)
{
    int ids[SIM_BATCH], n = 0, note = note_id(sim.cur);
    sim.deaths++;
    sim_log("worker %s: %s", sig ? strsignal(sig) : "exits", where);
    n = sim_life_batch_ids(ids, SIM_BATCH);
    /* Whoever was in flight, other than a crasher by its own hand, was cut short. */
    for (int i = 0; i < n; i++)
        if (!(note >= 0 && sig != SIGKILL && ids[i] == note))
            sim.truth[ids[i]].kills_in_flight++;
    for (int id = 0; id < sim.o.n_msgs; id++)
        for (int r = 0; r < SIM_ROWS; r++)
            if (sim_db.row[id][r] && sim.truth[id].row_confirmed[r])
                sim.truth[id].row_may_resend[r] = true; /* its DELETE may never have run */
    /* A successor killed before it counted its predecessor's crash: the supervisor's reap keeps
     * the signal of the worker that wrote the pending note (sup_step.c sup_note_signal). With
     * lost_note, as before 2026-12, it overwrites it, so the next successor takes that crash
     * for a kill from outside and does not count it. (Bookkeeping only: sup_step decides.) */
    if (starting && note >= 0 && sim_sup_note_signal(sim.cur) != SIGKILL && sig == SIGKILL &&
        sim.bug.lost_note) {
        sim.truth[note].notes_lost++;
        sim_log("crash note of m%d: its exit signal is overwritten by this kill: not counted",
                note);
    }
    /* What becomes of a retiring worker's slot is the supervisor's reap rule (sup_step.c). */
    if (sim.retiring[sim.cur])
        retire_check(sim.kill_in[sim.cur] < 0 ? "killed by the autoscaler" : NULL);
    sim.retiring[sim.cur] = sim.note_only[sim.cur] = false;
    sim.kill_in[sim.cur] = 0;
    /* The successor's view: the broker requeues what was unacked, the server rolls back. */
    sim_life_die();
    sim_mq_close_consumer();
    sim_pub_close();
    sim_db_disconnect();
    starting = false;
    sim_sup_exit(sim.cur, sig, WORKER_EXIT_TEMPFAIL);
    longjmp(sim.death, 1);
}

void sim_maybe_die(const char *where)
{
    /* --bug retire_kill: the autoscaler's SIGKILL lands here. */
    if (sim.retiring[sim.cur] && sim.kill_in[sim.cur] > 0 && --sim.kill_in[sim.cur] == 0) {
        sim.kill_in[sim.cur] = -1;
        sim_die(SIGKILL, "retired by the autoscaler with SIGKILL");
    }
    if (sim_fault(sim.o.pm_death))
        sim_die(SIGKILL, where);
}

void sim_retired(void)
{
    sim_log("retired: drained, exits");
    retire_check("drained");
    sim_life_exit();
    sim_mq_close_consumer();
    sim_pub_close();
    sim_db_disconnect();
    sim.retiring[sim.cur] = sim.note_only[sim.cur] = false;
    starting = false;
    sim_sup_exit(sim.cur, 0, WORKER_EXIT_STOPPED);
}

/*
 * A retirement hands back nothing it committed: a worker the autoscaler
 * retires finishes its batch and settles it before it exits (step_drain
 * runs whole steps), so no message it committed comes back to run again
 * (a duplicate, or with dedup = "none" its effects twice). how: the exit
 * (NULL: a death of its own while draining, not the retirement's doing).
 */
static void retire_check(const char *how)
{
    int ids[SIM_BATCH];
    int n = how ? sim_life_unsettled(ids, SIM_BATCH) : 0;
    for (int i = 0; i < n; i++)
        sim_violation("retired worker w%d (%s) exits with m%d committed and not settled: it "
                      "comes back and runs again",
                      sim.cur, how, ids[i]);
}

void sim_on_ack(int id)
{
    /* Invariants 1 and 2 at the moment an original goes: its effects committed, or a copy
     * of it (delay tier, dead letter queue) or another delivery of it still alive. */
    bool dead_lettered = false;
    for (int q = SQ_DLQ; q <= SQ_BDLX; q++)
        for (int i = 0; i < sim_mq.qn[q]; i++)
            dead_lettered |= sim_mq.q[q][i].id == id && sim_mq.q[q][i].row < 0;
    if (sim_db.eff[id] == 0 && sim_mq_count(id) == 0 && !dead_lettered)
        sim_violation("m%d acked with no effects committed and no copy anywhere: lost", id);
}

/* The handler's own code: a few milliseconds. */
static void handler_time(void)
{
    /* workers = "auto": a slow handler (50 to 250 ms), the load the autoscaler is for: the
     * backlog lasts long enough for it to add workers, judge them and take them back. */
    sim.now_ms +=
        sim.o.autoscale ? 50 + sim_rng_below(&sim.rng, 200) : 1 + sim_rng_below(&sim.rng, 40);
}

/*
 * One statement of the handler under handler_timeout: a lock wait past it
 * is the database's doing (stall.c: not a crash); with alarm_as_crash, as
 * before stall.c, SIGALRM ends the worker and the successor counts a crash.
 */
static unsigned handler_stmt(int id, int row)
{
    uint64_t waited;
    unsigned e = sim_db_stmt(id, row, &waited);
    if (waited > (uint64_t)sim.o.handler_timeout_ms) {
        if (sim.bug.alarm_as_crash) {
            sim.now_ms += (uint64_t)sim.o.handler_timeout_ms;
            sim_die(SIGALRM, "handler_timeout while the handler waits on a database lock");
        }
        sim_log("stall watchdog: m%d waits on the database for %llu ms: not a crash", id,
                (unsigned long long)waited);
    }
    sim.now_ms += waited;
    return e;
}

/*
 * The crash limit (docs/lifecycle.md): exact with one worker, at most
 * workers - 1 over with more. Called as the handler of id is about to kill
 * its worker. A suspect run starts only while the counted crashes are below
 * max_attempts, and each other worker's slot holds at most one crash its
 * successor has not counted yet. A delivery that is not redelivered runs
 without the guard: a message that arrives fresh more than once (the
 * publisher sent it twice, or a retry copy came back from the delay tier
 * after a run the database failed) has one such run per arrival, which may
 * come after the limit. A death inside handle_batch leaves no crash note
 * (worker_op_handle_many): each of its messages comes back redelivered and
 * runs alone through handle(). Only fresh deliveries run in handle_batch,
 * so that happens at most once per arrival. A successor killed before it
 * counts its predecessor's crash loses nothing: the note keeps the crasher's
 * signal (with --bug lost_note it did not, and the limit was passed).
 */

static void check_crash_limit(int id)
{
    sim_truth_t *tr = &sim.truth[id];
    int limit = sim.o.max_attempts + (sim.o.racing - 1) + (tr->arrivals - 1) + tr->notes_gone;
    if (note_id(sim.cur) < 0) {
        if (++tr->batch_crashes > tr->arrivals)
            sim_violation("m%d: crashed handle_batch %d times, arrived fresh %d times", id,
                          tr->batch_crashes, tr->arrivals);
        return;
    }
    if (++tr->own_crashes > limit - (sim.o.racing - 1))
        sim.overshoots++; /* a run on counts short by another worker's uncounted crash */
    if (tr->own_crashes > limit)
        sim_violation("m%d: its handler crashed its worker %d times, over the limit %d "
                      "(max_attempts %d, %d workers, arrived fresh %d times, %d crash notes lost, "
                      "%d gone with an instance; %lld crashes counted)",
                      id, tr->own_crashes, limit, sim.o.max_attempts, sim.o.racing, tr->arrivals,
                      tr->notes_lost, tr->notes_gone, sim_db.crashes[id]);
}

/* The test handler's verdict on one message (both handle and handle_batch use it). */
static idemd_result_t handler_run(txn_msg_t *m, unsigned *err)
{
    int id = sim_id_of(m);
    const sim_truth_t *tr = &sim.truth[id];
    unsigned e;

    handler_time();
    if (tr->rows > 0)
        sim_life_published(); /* its host->publish calls (worker_publish) */
    if (tr->kind == SIM_CRASH) {
        check_crash_limit(id);
        sim_die(SIGSEGV, "the handler crashed");
    }
    if ((e = handler_stmt(id, -1)) != 0) {
        *err = e;
        snprintf(m->reason, sizeof(m->reason), "statement failed: %u", e);
        return IDEMD_RESULT_RETRY; /* a well-behaved handler */
    }
    for (int r = 0; r < tr->rows; r++)
        if ((e = handler_stmt(id, r)) != 0) {
            *err = e;
            snprintf(m->reason, sizeof(m->reason), "outbox insert failed: %u", e);
            return IDEMD_RESULT_RETRY;
        }
    if (tr->kind == SIM_FLAKY && m->attempt == 1) {
        snprintf(m->reason, sizeof(m->reason), "flaky: try again");
        return IDEMD_RESULT_RETRY;
    }
    if (tr->kind == SIM_POISON) {
        snprintf(m->reason, sizeof(m->reason), "poisoned message");
        return IDEMD_RESULT_REJECT;
    }
    return IDEMD_RESULT_OK;
}

/* txn_ops_t.handle: the crash note in the slot brackets the call (worker_op_handle). */
static idemd_result_t op_handle(void *ctx, int i, txn_msg_t *m, unsigned *err)
{
    (void)ctx;
    (void)i;
    worker_slot_t *sl = sim_sup_slot(sim.cur);
    sl->crash_id_len = (uint32_t)snprintf(sl->crash_id, sizeof(sl->crash_id), "m%d", sim_id_of(m));
    sl->crash_counted = m->counted;
    sl->crash_gen = sl->spawn_gen;
    sl->in_handler = 1;
    m->reason[0] = '\0';
    idemd_result_t r = handler_run(m, err);
    sl->in_handler = 0;
    return r;
}

/* txn_ops_t.handle_many: one call for the batch, failing as a whole on a poisoned message. */
static int op_handle_many(void *ctx, txn_msg_t *const *ms, int k, idemd_result_t *r, unsigned *err)
{
    (void)ctx;
    handler_time();
    for (int j = 0; j < k; j++)
        if (sim.truth[sim_id_of(ms[j])].kind == SIM_POISON) {
            snprintf(ms[0]->reason, sizeof(ms[0]->reason), "batch failed: poisoned message");
            return -1;
        }
    for (int j = 0; j < k; j++) {
        unsigned e = 0;
        r[j] = handler_run(ms[j], &e);
        /* The daemon reads the connection's last error after the call: a lost session's
         * stays the last (every later statement fails with it), an earlier one's may not. */
        if (e && (!*err || sim_db_session_lost(e)))
            *err = e;
    }
    return 0;
}

/* txn_ops_t.order: the key rows of worker sim.cur's batch (order_batch.c over sim_db's key
 * tables), as worker_op_order. */
static unsigned op_order(void *ctx, int i, txn_msg_t *m, txn_order_step_t step, bool *wait)
{
    (void)ctx;
    return order_batch_op(sim_life_order(), i, m, step, wait);
}

const txn_ops_t sim_txn_ops_ordered = {
    sim_db_exec,
    sim_db_record,
    sim_db_clear,
    op_handle,
    sim_db_record_many,
    sim_db_find_records,
    op_handle_many,
    op_order,
    NULL,
    NULL,
    NULL,
    NULL,
};

const txn_ops_t sim_txn_ops = {
    sim_db_exec,    sim_db_record, sim_db_clear, op_handle, sim_db_record_many, sim_db_find_records,
    op_handle_many, NULL, /* order: ordered queues are not simulated
                             (docs/ordering.md) */
    NULL,                 /* error_text */
    NULL,                 /* begin, end: the simulated database's exec */
    NULL,           NULL, /* held */
};

/* Whether a retry's reason is the database's doing (an injected error or lock wait), not the
 * message's nor idemd's. */
bool sim_infra_reason(const char *why)
{
    static const char *const db[] = {"statement failed", "outbox insert failed", "lock wait",
                                     "transaction lost"};
    for (size_t k = 0; k < sizeof(db) / sizeof(db[0]); k++)
        if (strstr(why, db[k]))
            return true;
    return false;
}

void sim_after_txn(const txn_msg_t *tm, int n)
{
    for (int i = 0; i < n; i++) {
        const txn_msg_t *m = &tm[i];
        sim_truth_t *tr = &sim.truth[sim_id_of(m)];
        if (m->state == TXN_RETRY && sim_infra_reason(m->reason))
            tr->infra_fails++;
        /* A lost session (a lost connection, a primary demoted or leaving) is never a failed
         * attempt of the message: the worker reconnects and the broker redelivers. */
        unsigned e = 0;
        if (m->state == TXN_RETRY &&
            (sscanf(m->reason, "statement failed: %u", &e) == 1 ||
             sscanf(m->reason, "outbox insert failed: %u", &e) == 1) &&
            sim_db_session_lost(e))
            sim_violation("m%d retried (an attempt counted) for error %u, which only loses the "
                          "session",
                          sim_id_of(m), e);
        txn_route_t r = txn_route(m, sim.o.max_attempts, sim.o.has_dlq);
        if (r == TXN_ROUTE_DLQ || r == TXN_ROUTE_BROKER) {
            snprintf(tr->dl_reason, sizeof(tr->dl_reason), "%.150s", m->reason);
            /* Dead-lettered as crashed only after max_attempts crashes were counted. */
            if (strncmp(m->reason, "handler crashed", 15) == 0 &&
                sim_db.crashes[sim_id_of(m)] < sim.o.max_attempts)
                sim_violation("m%d dead-lettered as crashed with %lld crashes counted (limit %d)",
                              sim_id_of(m), sim_db.crashes[sim_id_of(m)], sim.o.max_attempts);
        }
        /* Invariant 1 as the transaction ends: committed means committed once (dedup = "none":
         * at least once). */
        if (m->state == TXN_COMMITTED &&
            (sim.o.dedup_none ? sim_db.eff[sim_id_of(m)] < 1 : sim_db.eff[sim_id_of(m)] != 1))
            sim_violation("m%d committed with %d effects in the database", sim_id_of(m),
                          sim_db.eff[sim_id_of(m)]);
    }
}

/* ---------- invariants ---------- */

/* Invariant 1 and 5, after every step. */
static void check_step(void)
{
    for (int id = 0; id < sim.o.n_msgs && !sim.o.dedup_none; id++)
        if (sim_db.eff[id] > 1)
            sim_violation("m%d: effects committed %d times", id, sim_db.eff[id]);
    int held = sim_life_held(sim.cur), n = sim_life_batch_n(sim.cur);
    if (held > sim.o.max_held)
        sim_violation("held list at %d, over its bound %d", held, sim.o.max_held);
    if (sim_mq.n_unacked > sim.o.prefetch)
        sim_violation("%d unacked, over prefetch %d", sim_mq.n_unacked, sim.o.prefetch);
    if (n > sim.o.batch_size)
        sim_violation("batch of %d, over batch_size %d", n, sim.o.batch_size);
    if (sim_mq.dropped)
        sim_violation("the broker dropped %d message(s) at its delivery limit", sim_mq.dropped);
}

/* Why a dead letter of id is allowed (invariant 4), or NULL. */
static const char *dead_letter_ok(int id)
{
    const sim_truth_t *tr = &sim.truth[id];
    if (tr->kind == SIM_POISON || tr->kind == SIM_CRASH)
        return "poisoned";
    if (tr->max_dcount >= SIM_RETURNS_MAX)
        return "returned to its queue past the delivery-limit guard";
    if (tr->infra_fails + (tr->kind == SIM_FLAKY) >= sim.o.max_attempts)
        return "every attempt failed by the database's fault";
    if (strstr(tr->dl_reason, "started") && tr->kills_in_flight >= sim.o.max_attempts)
        return "its runs were killed again and again";
    return NULL;
}

/* Invariants 2, 3 and 4 at the end of a run. */
static void check_end(void)
{
    bool dl[SIM_MSGS] = {false};
    for (int q = SQ_DLQ; q <= SQ_BDLX; q++)
        for (int i = 0; i < sim_mq.qn[q]; i++) {
            const sim_bmsg_t *m = &sim_mq.q[q][i];
            if (m->row >= 0) {
                /* An onward message's dead letter (outbox.c): its reason names it. */
                if (!strstr(m->reason, "onward message not delivered"))
                    sim_violation("outbox row %d of m%d dead-lettered without its reason: '%s'",
                                  m->row, m->id, m->reason);
                continue;
            }
            dl[m->id] = true;
            if (!m->reason[0])
                sim_violation("m%d dead-lettered without a reason", m->id);
            if (!dead_letter_ok(m->id))
                sim_violation("m%d (not poisoned) dead-lettered: %s / %s", m->id, m->reason,
                              sim.truth[m->id].dl_reason);
            /* A message may be both: one copy given up by the database's fault, a second one
             * (its first copy's confirm was lost) committed; a replay is then a duplicate. */
        }
    for (int id = 0; id < sim.o.n_msgs; id++) {
        const sim_truth_t *tr = &sim.truth[id];
        /* dedup = "none" is at least once: a second effect is allowed and counted. */
        if (sim.o.dedup_none && sim_db.eff[id] > 1)
            sim.dup_effects += sim_db.eff[id] - 1;
        if ((sim.o.dedup_none ? sim_db.eff[id] == 0 : sim_db.eff[id] != 1) && !dl[id] &&
            sim_mq_count(id) == 0)
            sim_violation("m%d dropped: not committed, not dead-lettered, not queued", id);
        if ((tr->kind == SIM_POISON || tr->kind == SIM_CRASH) && sim_db.eff[id])
            sim_violation("m%d (poisoned) has committed effects", id);
        for (int r = 0; r < SIM_ROWS; r++) {
            if (tr->row_committed[r] && tr->row_sends[r] == 0)
                sim_violation("outbox row %d of m%d committed but never published", r, id);
            if (tr->row_committed[r] && !tr->row_delivered[r] && tr->row_dead[r] == 0)
                sim_violation("outbox row %d of m%d neither confirmed downstream nor "
                              "dead-lettered",
                              r, id);
            if (sim_db.row[id][r])
                sim_violation("outbox row %d of m%d still waiting after the drain", r, id);
        }
    }
}

/* ---------- one seed ---------- */

int sim_force_workers; /* --workers N, or 0: drawn by the seed */

static void draw_options(void)
{
    sim_opts_t *o = &sim.o;
    sim_rng_t *r = &sim.rng;
    /* Workers on the queue: 1 (40%), 2, 3 or 4 (20% each). */
    unsigned wk = sim_rng_below(&sim.sched, 10);
    o->workers = wk < 4 ? 1 : wk < 6 ? 2 : wk < 8 ? 3 : 4;
    if (sim_force_workers > 0)
        o->workers = sim_force_workers; /* --workers N: the rest of the seed is drawn the same */
    o->n_msgs = 4 + (int)sim_rng_below(r, SIM_MSGS - 4);
    o->batch_size = 1 + (int)sim_rng_below(r, SIM_BATCH);
    o->prefetch = 1 + (int)sim_rng_below(r, SIM_PREFETCH);
    o->max_held = o->prefetch / 2 > 0 ? o->prefetch / 2 : 1;
    o->max_attempts = 3 + (int)sim_rng_below(r, 3);
    o->handler_timeout_ms = 5000;
    o->bulk = sim_rng_below(r, 2);
    o->batch_handler = sim_rng_below(r, 2);
    o->rollback_on_timeout = sim_rng_below(r, 2);
    o->has_dlq = sim_rng_below(r, 10) != 0;
    o->quorum = sim_rng_below(r, 2);
    o->rmq4 = sim_rng_below(r, 2);
    o->outbox = sim_rng_below(r, 2);
    o->pm_db_fault = sim_rng_below(r, 30);
    o->pm_commit_lost = sim_rng_below(r, 20);
    o->pm_death = sim_rng_below(r, 6);
    o->pm_stall = sim_rng_below(r, 20);
    o->pm_unroutable = sim_rng_below(r, 120);
    o->pm_nack = sim_rng_below(r, 40);
    o->pm_close = sim_rng_below(r, 40);
    /* The relay's policy on a stream of its own: the other draws stay as they were. */
    sim_rng_t orng = {sim.seed ^ 0x0B7B0C5EED5EEDULL};
    o->ob_max_attempts = 1 + (int)sim_rng_below(&orng, 4);
    o->ob_backoff_ms = 50 << sim_rng_below(&orng, 6);
    /* dedup = "none" (one seed in four) on a stream of its own. */
    sim_rng_t drng = {sim.seed ^ 0xDED0C0DE5EED0001ULL};
    o->dedup_none = sim_rng_below(&drng, 4) == 0;
    /* A Group Replication primary (one seed in four) on a stream of its own: some lost
     * connections are its errors instead, and its picks come from grng. */
    sim_rng_t grng = {sim.seed ^ 0x6E0C0FA11BAC4321ULL};
    o->gr = sim_rng_below(&grng, 4) == 0;
    sim.grng = grng;
    /* An ordered queue (one seed in four of the others) on a stream of its own: as the config
     * check demands, one worker and dedup = "table"; and a classic queue, which puts a
     * redelivery back at the head (a quorum queue puts it at the tail, behind later messages
     * of its key: the order idemd keeps is the order of delivery, docs/ordering.md). */
    sim_rng_t krng = {sim.seed ^ 0x0DE5EEDC0FFEE123ULL};
    o->ordered = !o->dedup_none && sim_rng_below(&krng, 4) == 0;
    if (o->ordered) {
        o->workers = 1;
        o->quorum = false;
        o->n_keys = 1 + (int)sim_rng_below(&krng, SIM_KEYS);
    }
    /* workers = "auto" (one seed in four of the rest: not ordered, which is one worker) on a
     * stream of its own: workers_min 1 or 2, workers_max up to SIM_WORKERS - 1 (a slot stays
     * free for a worker still draining while another starts, as sup_auto_free_index). */
    sim_rng_t arng = {sim.seed ^ 0xA0705CA1E5EED777ULL};
    o->autoscale = !o->ordered && sim_force_workers == 0 && sim_rng_below(&arng, 4) == 0;
    if (o->autoscale) {
        o->as_min = 1 + (int)sim_rng_below(&arng, 2);
        o->as_max = o->as_min + (int)sim_rng_below(&arng, (unsigned)(SIM_WORKERS - o->as_min));
        o->workers = o->as_max + 1;
    }
    /* Two instances (one seed in four of the rest) on a stream of their own: 1 or 2 workers
     * each, and the rate at which a whole instance is killed. */
    sim_rng_t irng = {sim.seed ^ 0x2157A2CE5EED0042ULL};
    o->instances = 1;
    if (!o->ordered && !o->autoscale && sim_force_workers == 0 && sim_rng_below(&irng, 4) == 0) {
        o->instances = 2;
        o->workers = 2 * (1 + (int)sim_rng_below(&irng, 2));
        o->pm_instance_death = sim_rng_below(&irng, 8);
    }
    /* Reloads that change the queue (one seed in three of the rest with one or two workers),
     * on a stream of their own: slots for the draining workers and the new ones, which wait. */
    sim_rng_t rrng = {sim.seed ^ 0x7E10ADC0FFEE5EEDULL};
    o->racing = o->workers;
    if (!o->ordered && !o->autoscale && o->instances == 1 && sim_force_workers == 0 &&
        o->workers <= SIM_SLOTS / 2 && sim_rng_below(&rrng, 3) == 0) {
        o->reload = true;
        o->workers *= 2;
        o->pm_reload = 5 + sim_rng_below(&rrng, 25);
    }
    for (int id = 0; id < o->n_msgs; id++) {
        unsigned k = sim_rng_below(r, 100);
        sim.truth[id].kind = k < 70 ? SIM_OK : k < 82 ? SIM_FLAKY : k < 94 ? SIM_POISON : SIM_CRASH;
        sim.truth[id].rows = o->outbox ? (int)sim_rng_below(r, 3) : 0;
        sim.truth[id].key = o->ordered ? (int)sim_rng_below(&krng, (unsigned)o->n_keys) : 0;
    }
}

/* A lock taken by another session: LOCK TABLES, FLUSH TABLES WITH READ LOCK, a long row lock. */
static void maybe_lock(void)
{
    if (sim_db.lock_until_ms > sim.now_ms || !sim_fault(sim.o.pm_stall))
        return;
    sim_db.lock_until_ms =
        sim.now_ms + (uint64_t)sim.o.handler_timeout_ms * (1 + sim_rng_below(&sim.rng, 8));
    sim_db.lock_is_row = sim_rng_below(&sim.rng, 3) == 0;
    sim_log("another session takes a %s lock until %llu ms", sim_db.lock_is_row ? "row" : "table",
            (unsigned long long)sim_db.lock_until_ms);
}

static bool drained(void)
{
    if (sim_mq.qn[SQ_MAIN] || sim_mq.qn[SQ_DELAY] || sim_mq.n_unacked)
        return false;
    for (int k = 0; k < sim.o.workers; k++)
        if (!sim_life_idle(k) || (k != sim.cur && conns[k].n_unacked))
            return false;
    for (int id = 0; id < sim.o.n_msgs; id++)
        for (int r = 0; r < SIM_ROWS; r++)
            if (sim_db.row[id][r])
                return false;
    /* Every worker entry settled (none draining, none waiting to start again); workers =
     * "auto": an idle queue shrinks to workers_min, and the run waits for that. */
    if (!sim_sup_settled())
        return false;
    return !sim.o.autoscale || sim_sup_live() <= sim.o.as_min;
}

/* workers = "auto": the supervisor's controller keeps its workers within workers_min..max. */
static void check_autoscale(void)
{
    int live = sim_sup_live();
    if (sim.o.autoscale && (live < sim.o.as_min || live > sim.o.as_max))
        sim_violation("workers = \"auto\": %d workers running, outside %d..%d", live, sim.o.as_min,
                      sim.o.as_max);
}

/* Start seed's run: every global of the simulation reset, its options drawn and logged. */
static void sim_setup(uint64_t seed, const sim_bugs_t *bugs, bool trace)
{
    memset(&sim, 0, sizeof(sim));
    memset(conns, 0, sizeof(conns));
    sim.seed = seed;
    sim.rng.s = seed;
    sim.sched.s = seed ^ 0xA5A5F00DC0FFEE11ULL;
    sim.bug = *bugs;
    sim.trace = trace;
    starting = false;
    sim.now_ms = 1;
    if (&txn_test_no_fallback)
        txn_test_no_fallback = bugs->no_fallback;
    pubround_test_match_by_key = bugs->match_by_key;
    order_batch_test_stale_free = bugs->stale_free;
    sim_db_reset();
    sim_mq_reset();
    draw_options();
    const sim_opts_t *o = &sim.o;
    sup_test_lost_note = bugs->lost_note;
    sup_test_retire_gap = bugs->retire_gap;
    sim_log("seed %llu: %d worker(s), %d messages, batch_size %d, prefetch %d, max_attempts %d, "
            "bulk %d, "
            "handle_batch %d, rollback_on_timeout %d, dlq %d, %s%s, outbox %d (max_attempts %d, "
            "backoff %d ms), dedup %s, ordered %d (%d keys), workers auto %d (%d..%d), instances "
            "%d, reloads %d, group replication %d; per mille: db "
            "%u, commit lost %u, death %u, stall %u, unroutable %u, nack %u, close %u",
            (unsigned long long)seed, o->workers, o->n_msgs, o->batch_size, o->prefetch,
            o->max_attempts, o->bulk, o->batch_handler, o->rollback_on_timeout, o->has_dlq,
            o->quorum ? "quorum" : "classic", o->quorum ? (o->rmq4 ? " 4.x" : " 3.x") : "",
            o->outbox, o->ob_max_attempts, o->ob_backoff_ms, o->dedup_none ? "none" : "table",
            o->ordered, o->n_keys, o->autoscale, o->as_min, o->as_max, o->instances, o->reload,
            o->gr, o->pm_db_fault, o->pm_commit_lost, o->pm_death, o->pm_stall, o->pm_unroutable,
            o->pm_nack, o->pm_close);
}

/* Publish the seed's messages into the main queue, one in 20 twice (the publisher re-sent it). */
static void sim_publish_all(void)
{
    for (int id = 0; id < sim.o.n_msgs; id++) {
        sim_bmsg_t m;
        memset(&m, 0, sizeof(m));
        m.id = id;
        m.row = -1;
        sim_mq_put(SQ_MAIN, &m);
        sim.truth[id].arrivals = 1;
        if (sim_rng_below(&sim.rng, 20) == 0) {
            sim_mq_put(SQ_MAIN, &m); /* the publisher sent it twice */
            sim.truth[id].arrivals = 2;
        }
    }
    sim_log("%d messages published; the worker is %s", sim_mq.qn[SQ_MAIN],
            "step.c (batch.c, guard.c, txn.c, settle.c)");
}

/*
 * One step of the daemon's workers: each takes a turn, in an order the seed
 * picks; a dead one's successor waits out its restart back-off. tick: the
 * step's clock advance. true when any worker had work.
 */
static bool sim_turns(uint64_t tick)
{
    const sim_opts_t *o = &sim.o;
    bool busy = false;

    if (o->instances > 1 && !sim.calm && sim_rng_pm(&sim.sched, o->pm_instance_death))
        instance_kill((int)sim_rng_below(&sim.sched, 2));
    if (o->reload && !sim.calm && sim_rng_pm(&sim.sched, o->pm_reload))
        sim_sup_reload();
    sim_sup_step(); /* reaps, restarts, autoscales: the daemon's own step */
    check_autoscale();
    int first_k = o->workers > 1 ? (int)sim_rng_below(&sim.sched, (unsigned)o->workers) : 0;
    for (int j = 0; j < o->workers && !sim.failed; j++) {
        int k = (first_k + j) % o->workers;
        if (!sim_sup_alive(k))
            continue;
        sim_switch(k);
        uint64_t t0 = sim.now_ms;
        bool ran = sim_life_step();
        busy |= ran;
        sim_sup_time(k, ran, tick + sim.now_ms - t0);
        check_step();
    }
    return busy;
}

/* Idle: the clock jumps to the next thing that can happen (next: the broker's next event). */
static void sim_idle(uint64_t next)
{
    const sim_opts_t *o = &sim.o;
    uint64_t t = next, ob = sim_outbox_next_ms();

    if (ob && (t == 0 || ob < t))
        t = ob;
    for (int k = 0; k < o->workers; k++) {
        uint64_t h = sim_life_held_next_ms(k);
        if (h && (t == 0 || h < t))
            t = h;
    }
    uint64_t sup = sim_sup_next_ms();
    if (sup && (t == 0 || sup < t))
        t = sup;
    for (int k = 0; t > sim.now_ms && k < o->workers; k++)
        if (sim_sup_alive(k))
            sim_sup_time(k, false, t - sim.now_ms);
    if (t > sim.now_ms)
        sim.now_ms = t;
}

/* Run one seed; true when every invariant held. */
bool sim_run(uint64_t seed, const sim_bugs_t *bugs, bool trace)
{
    sim_setup(seed, bugs, trace);
    sim_publish_all();
    sim_outbox_begin(); /* before the workers: their steps relay through its outbox */
    sim_life_begin();
    sim_sup_begin(); /* the supervisor starts the workers at the first step */
    while (!sim.failed) {
        if (setjmp(sim.death) != 0)
            continue; /* the worker died: its successor takes the next step */
        sim.steps++;
        if (sim.steps == SIM_CHAOS_STEPS) {
            sim.calm = true;
            sim_log("calm: no more faults; draining");
        }
        if (sim.steps > SIM_CHAOS_STEPS + SIM_DRAIN_STEPS) {
            sim_violation("not drained after %d calm steps", SIM_DRAIN_STEPS);
            break;
        }
        maybe_lock();
        uint64_t tick = 1 + sim_rng_below(&sim.rng, 20);
        sim.now_ms += tick;
        uint64_t next = sim_mq_tick();
        bool busy = sim_turns(tick);
        if (!busy && sim.calm && drained())
            break;
        if (!busy)
            sim_idle(next);
    }
    if (!sim.failed)
        check_end();
    sim_sup_end();
    sim_life_end();
    sim_outbox_end();
    conns_free();
    sim_mq_reset();
    return !sim.failed;
}
