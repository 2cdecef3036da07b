/* sim.h: the deterministic simulation's shared world: one seed, one clock, a simulated broker
 * and database, the message catalogue and the invariant reporter (docs/simulation.md).
 */
#ifndef IDEMD_SIM_H
#define IDEMD_SIM_H

#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>

#include "amqp_compat.h"
#include "autoscale.h"
#include "conf.h"
#include "order_batch.h"
#include "port.h"
#include "copies.h"
#include "txn.h"

/* ---------- randomness: splitmix64, the only source of choice in a run ---------- */
typedef struct sim_rng {
    uint64_t s;
} sim_rng_t;

static inline uint64_t sim_rng_next(sim_rng_t *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* 0..n-1 (n > 0). */
static inline unsigned sim_rng_below(sim_rng_t *r, unsigned n)
{
    return (unsigned)(sim_rng_next(r) % n);
}

/* True with probability pm per mille. */
static inline bool sim_rng_pm(sim_rng_t *r, unsigned pm)
{
    return pm > 0 && sim_rng_below(r, 1000) < pm;
}

/* ---------- sizes: everything is bounded, invariant 5 checks the bounds ---------- */
#define SIM_MSGS 48  /* distinct message ids of one run */
#define SIM_QCAP 512 /* messages a simulated queue may hold */
#define SIM_BATCH 8  /* largest batch_size drawn */
#define SIM_PREFETCH 16
#define SIM_ROWS 4             /* outbox rows one message may write */
#define SIM_ROUND 32           /* copies of one publishing round */
#define SIM_LOCK_WAIT_MS 15000 /* innodb_lock_wait_timeout: a row lock wait ends in 1205 */
#define SIM_WORKERS 4          /* most workers drawn for the queue */
#define SIM_SLOTS SIM_WORKERS  /* simulated worker processes (supervisor entries) at most */
#define SIM_HEARTBEAT_S 4      /* broker.heartbeat: a batch starts handlers for at most 2 s */
#define SIM_DRAIN_MS 5000      /* worker.c WORKER_DRAIN_MS: a retiring worker drains this long */
#define SIM_KEYS 4             /* most order keys of an ordered queue's run */
#define SIM_ORDER_SNAPS 128    /* key-table versions one open transaction may write */

/* How a message's handler behaves. */
typedef enum sim_kind {
    SIM_OK = 0, /* one business row; ok */
    SIM_FLAKY,  /* asks to retry on its first attempt, then ok */
    SIM_POISON, /* rejects; handle_batch fails as a whole on a batch holding it */
    SIM_CRASH,  /* kills its worker inside the handler (SIGSEGV) */
} sim_kind_t;

/* Queues of the simulated broker. */
typedef enum sim_queue {
    SQ_MAIN = 0, /* the consumed queue */
    SQ_DELAY,    /* the delay tier: a TTL queue that dead-letters back into SQ_MAIN */
    SQ_DLQ,      /* idemd's dead letter queue (copies with a reason) */
    SQ_BDLX,     /* the broker's own dead-lettering (nack without requeue, delivery limit) */
    SQ_DOWN,     /* downstream: where outbox rows are published */
    SQ_N
} sim_queue_t;

/* One message inside the broker. */
typedef struct sim_bmsg {
    int id;            /* index in the catalogue; for SQ_DOWN the outbox row's message */
    int row;           /* SQ_DOWN: which row of that message; else -1 */
    unsigned attempts; /* the signed idemd-attempts header of a retry copy: runs so far */
    bool redelivered;
    int dcount;        /* quorum queues: x-delivery-count */
    uint64_t ready_ms; /* SQ_DELAY: when its TTL expires */
    char reason[160];  /* SQ_DLQ / SQ_BDLX: why */
    /* Its AMQP properties as published (sim_life.c), in pool; pool NULL: none kept. The entry
     * owns the pool: whoever drops the entry frees it (sim_bmsg_free). */
    amqp_pool_t *pool;
    amqp_basic_properties_t props;
} sim_bmsg_t;

/* Free what a broker entry owns (its properties' pool). */
void sim_bmsg_free(sim_bmsg_t *m);

/* The options one seed draws (printed with --trace). */
typedef struct sim_opts {
    int n_msgs, batch_size, prefetch, max_attempts, handler_timeout_ms, max_held;
    int workers; /* workers consuming the queue (1..SIM_WORKERS) */
    bool bulk, batch_handler, rollback_on_timeout, has_dlq, quorum, rmq4, outbox;
    unsigned pm_db_fault, pm_commit_lost, pm_death, pm_stall, pm_unroutable, pm_nack, pm_close;
    int ob_max_attempts, ob_backoff_ms; /* daemon.outbox_max_attempts, outbox_backoff_ms */
    bool dedup_none; /* dedup = "none": no record table, at least once (invariant 1 relaxed) */
    bool gr;         /* a MySQL Group Replication primary: its errors among the faults (sim_db.c) */
    bool ordered;    /* order_key = "header:k" (one worker, a classic queue, dedup table) */
    int n_keys;      /* ordered: keys k0..k<n_keys-1> */
    /* workers = "auto" (workers then counts the slots: as_max + 1, room for one draining) */
    bool autoscale;
    int as_min, as_max; /* workers_min, workers_max */
    /* Two idemd instances on the queue (workers 2 or 4: the first half is instance 0's, the
     * rest instance 1's), each with its own supervisor and slots; same broker and database. */
    int instances;
    unsigned pm_instance_death; /* per step: a whole instance is killed (kill -9 of its
                                 * supervisor and workers), then restarted */
    /* Reloads that change the queue (one or two workers, slots for the old and the new): its
     * workers drain while new ones wait, so retiring workers die in their handlers while
     * draining (the reap rule, --bug retire_gap). */
    bool reload;
    unsigned pm_reload;
    int racing; /* workers that may run the queue at once (the crash limit's allowance) */
} sim_opts_t;

/* Test-only switches that put an old behaviour back (sim --bug NAME). */
typedef struct sim_bugs {
    bool no_fallback;    /* txn_test_no_fallback: a failed handle_batch retries all together */
    bool match_by_key;   /* returns marked by routing key, not by the publish sequence */
    bool alarm_as_crash; /* a database lock wait past handler_timeout is a handler crash */
    bool lost_note;      /* sup_reap before 2026-12: a successor's kill overwrites a crash note's
                          * signal, so the crash is not counted */
    bool auto_ack;       /* a deliberately broken consumer (dedup = "none" seeds): consuming with
                          * no_ack, the broker forgets a delivery as it sends it, before its
                          * commit */
    bool stale_free;     /* order_batch_test_stale_free: a later message of a key an earlier one of
                          * the batch blocked trusts the pass's first read and runs past it */
    bool retire_kill;    /* the autoscaler retires a worker with SIGKILL, not SIGTERM and its
                          * drain: it dies wherever it is, between a COMMIT and its acks */
    bool guard_per_instance; /* two instances: the crash guard's rows (idemd_attempt) kept per
                              * instance, so each counts only its own workers' crashes */
    bool retire_gap; /* sup_test_retire_gap: a retiring worker's exit is logged as drained even
                      * when it died in its handler, its crash note not counted */
} sim_bugs_t;

/* What the catalogue knows about each message id (the ground truth). */
typedef struct sim_truth {
    sim_kind_t kind;
    int rows;            /* outbox rows its handler writes */
    int infra_fails;     /* attempts that failed by the database's fault (not its own) */
    int kills_in_flight; /* deaths (not its own crash) while it was in a batch */
    int max_dcount;      /* highest x-delivery-count it reached */
    int arrivals; /* fresh (not redelivered) arrivals: published (1 or 2), back from the delay tier
                   */
    int own_crashes;              /* runs of handle() on it that killed the worker (SIGSEGV) */
    int batch_crashes;            /* handle_batch calls holding it that killed the worker */
    int notes_lost;               /* its crash notes lost: the successor was killed first */
    int notes_gone;               /* its crash notes gone with a killed instance's slots */
    char dl_reason[160];          /* why idemd dead-lettered it (route DLQ or BROKER), or "" */
    bool row_committed[SIM_ROWS]; /* its outbox row was committed (with its effects) */
    int row_sends[SIM_ROWS];
    bool row_confirmed[SIM_ROWS];  /* a send of the row was confirmed by the broker */
    bool row_may_resend[SIM_ROWS]; /* confirmed, but its delete was lost: one more send is ok */
    int row_resends[SIM_ROWS];     /* sends after a confirm */
    bool row_delivered[SIM_ROWS];  /* some send of the row was confirmed */
    int row_dead[SIM_ROWS];        /* its dead letters the broker confirmed */
    int key;                       /* ordered: its order key (k<key>) */
} sim_truth_t;

typedef struct sim {
    uint64_t seed;
    sim_rng_t rng;
    /* The scheduler's own stream (how many workers, whose turn, restart delays): with one
     * worker it draws nothing from rng, so a seed of one worker runs as it did before. */
    sim_rng_t sched;
    /* Which Group Replication error a fault is (o.gr only): a stream of its own, so the other
     * seeds draw as before. */
    sim_rng_t grng;
    int cur; /* the worker whose connections are in sim_mq and sim_db */
    uint64_t now_ms;
    sim_opts_t o;
    sim_bugs_t bug;
    bool trace, calm; /* calm: faults off, the run drains */
    sim_truth_t truth[SIM_MSGS];
    jmp_buf death; /* sim_die() jumps here: the worker process is gone */
    int deaths, crashes_seen;
    int overshoots;  /* crashes past max_attempts that only other workers' uncounted ones explain */
    int dup_effects; /* dedup = "none": effects applied more than once (allowed, counted) */
    /* The worker processes as the supervisor (sim_sup.c) runs them. retiring: draining
     * (step_drain) after its SIGTERM; note_only: started once more to count a retiring
     * predecessor's crash note, it drains after its first step. */
    bool retiring[SIM_SLOTS], note_only[SIM_SLOTS];
    int kill_in[SIM_SLOTS]; /* --bug retire_kill: the SIGKILL lands at its Nth statement */
    int retirements, reloads;
    int instance_deaths;
    int retire_notes; /* retiring workers that died in the handler: their note counted by one
                       * more run in the slot (sup_reap's note_only) */
    long steps;
    bool failed;
    char why[512];
} sim_t;

extern sim_t sim;

/* A trace line (printed with --trace only). */
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* An invariant broke: keep the first reason; the run stops at the next check. */
void sim_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The worker process dies here (sig: its signal; in_handler: inside the handler on id). */
void sim_die(int sig, const char *where) __attribute__((noreturn));

/* Whether a fault with probability pm hits now (never once calm). */
bool sim_fault(unsigned pm);

/* A possible death of the worker at this step. */
void sim_maybe_die(const char *where);

/* ---------- the simulated database (sim_db.c) ---------- */
typedef struct sim_db {
    /* Committed. */
    int rec[SIM_MSGS], eff[SIM_MSGS];
    long long starts[SIM_MSGS], crashes[SIM_MSGS];
    /* --bug guard_per_instance: instance 1's own starts and crashes. */
    long long starts1[SIM_MSGS], crashes1[SIM_MSGS];
    bool row[SIM_MSGS][SIM_ROWS]; /* outbox rows waiting for the relay */
    /* Their idemd_outbox columns: attempts, next_at, failed_at, last_error. */
    unsigned row_attempts[SIM_MSGS][SIM_ROWS];
    uint64_t row_next_ms[SIM_MSGS][SIM_ROWS];
    long long row_failed_s[SIM_MSGS][SIM_ROWS];
    char row_error[SIM_MSGS][SIM_ROWS][96];
    /* The open transaction: a list of writes; savepoints are positions in it. */
    struct {
        int kind, id, row;
    } w[256];
    int nw;
    struct {
        char name[8];
        int at;
    } sp[SIM_BATCH + 2];
    int nsp;
    bool dead;              /* the connection is gone: every call fails with 2006 */
    unsigned ro_err;        /* a Group Replication primary demoted or leaving under the
                             * session: every write and COMMIT fails with this (1290, 3100,
                             * 3781..3783, 3796), reads and savepoints work */
    uint64_t lock_until_ms; /* another session locks the business table until then */
    /* An ordered queue's key tables (idemd_order_block, idemd_order_waiter): committed, and the
     * versions the open transaction wrote (a W_ORDER write names its version; a rollback to a
     * savepoint drops the later ones). */
    struct sim_order_tab {
        int head[SIM_KEYS]; /* the key's head message id; -1: the key is not blocked */
        bool held[SIM_KEYS];
        int wseq[SIM_MSGS]; /* a waiter's place behind its key's head; 0: not waiting */
        int next_seq;
    } order, osnap[SIM_ORDER_SNAPS];
    bool lock_is_row; /* an InnoDB row lock (1205 after SIM_LOCK_WAIT_MS), else a table lock */
} sim_db_t;

extern sim_db_t sim_db;

/* A new database: nothing committed, no transaction, connected. */
void sim_db_reset(void);
/* The connection is gone with its open transaction (the successor's view). */
void sim_db_disconnect(void);
/* Whether e is an error sim_db injects as a lost session (2006, 2013, and a Group Replication
 * primary's: sim_db.c), classified by the simulator itself, not by db_classify. */
bool sim_db_session_lost(unsigned e);
/* txn_ops_t's database calls: 0 or a MySQL error number, done to the transaction as the server
 * does it. */
unsigned sim_db_exec(void *ctx, const char *sql);
unsigned sim_db_record(void *ctx, const txn_msg_t *m);
unsigned sim_db_clear(void *ctx, const txn_msg_t *m);
unsigned sim_db_record_many(void *ctx, txn_msg_t *const *ms, int k);
unsigned sim_db_find_records(void *ctx, txn_msg_t *const *ms, int k, bool *found);
/* One statement of a handler: the business row of id (row < 0) or its outbox row. *waited_ms:
 * how long it waited for a lock another session holds. */
unsigned sim_db_stmt(int id, int row, uint64_t *waited_ms);
/* The crash guard's statements (db_find_records, db_attempt_bump, db_attempt_crash): committed
 * at once. */
unsigned sim_db_find(int id, bool *found);
long long sim_db_bump(int id, long long *crashes);
long long sim_db_crash(int id, bool add_start);
/* Take back one counted start (never below 0). 0 or an error number. */
unsigned sim_db_unstart(int id);
/* The relay's DELETE of a published outbox row (its own transaction; the model's). */
unsigned sim_db_row_delete(int id, int row);
/* Before one of the outbox relay's statements: a death, a lost connection, or (deadlock) a
 * 1213 that rolls the relay's transaction back. 0 or the error number. */
unsigned sim_db_outbox_fault(const char *what, bool deadlock);
/* An ordered queue's key tables (order_db_ops_t over the tables above). */
extern const order_db_ops_t sim_order_db_ops;
/* A message id of the catalogue from a txn message ("m<N>"). */
int sim_id_of(const txn_msg_t *m);

/* ---------- the simulated broker (sim_mq.c) ---------- */
typedef struct sim_delivery {
    uint64_t tag;
    sim_bmsg_t m;
    bool auto_acked; /* --bug auto_ack: the broker forgot it as it sent it */
} sim_delivery_t;

typedef struct sim_copy {
    uint64_t seq;
    sim_queue_t target;
    sim_bmsg_t m;
    bool routed;   /* truth: the broker put it in its queue */
    bool returned; /* truth: the broker sent basic.return */
    bool nacked;   /* truth: the broker refused it */
} sim_copy_t;

typedef struct sim_mq {
    sim_bmsg_t q[SQ_N][SIM_QCAP];
    int qn[SQ_N];
    /* The consuming channel. */
    sim_delivery_t unacked[SIM_PREFETCH];
    int n_unacked;
    uint64_t next_tag;
    /* The publishing channel (confirm mode). */
    bool pub_open;
    uint64_t pub_seq;
    sim_copy_t sent[SIM_ROUND]; /* this round's copies, in publishing order */
    int n_sent;
    int dropped;    /* messages the broker deleted (4.x delivery limit, no dead-lettering) */
    bool cancelled; /* the consumer was cancelled (basic.cancel): nothing more is delivered */
} sim_mq_t;

extern sim_mq_t sim_mq;

void sim_mq_reset(void);
/* Put a new message in queue q (the publisher's, or a TTL expiry). */
void sim_mq_put(sim_queue_t q, const sim_bmsg_t *m);
/* basic.deliver of the next ready message within prefetch; false when none. */
bool sim_mq_next(sim_delivery_t *d);
/* basic.ack (multiple: every tag up to tag), basic.nack (requeue or not) of one delivery: 0, or
 * -1 when the channel failed. */
int sim_mq_ack(uint64_t tag, bool multiple);
int sim_mq_nack(uint64_t tag, bool requeue);
/* The consumer's connection closed: every unacked delivery back to the queue, redelivered. */
void sim_mq_close_consumer(void);
/* Move expired delay-tier messages back to SQ_MAIN; the time of the next expiry or 0. */
uint64_t sim_mq_tick(void);

/* The publishing side: begin a round, publish one copy (which takes over m's pool; with a pool,
 * the caller gives the worker its chance to die before building it) (its index, or -1 when the
 * channel is closed), wait for confirms (0, or -1 when the channel closed: unsettled copies not
 * ok), and whether copy i is ok: confirmed by basic.ack and not returned, as the round's matching
 * decides. */
void sim_pub_begin(void);
int sim_pub_publish(sim_queue_t target, const sim_bmsg_t *m);
int sim_pub_wait(void);
bool sim_pub_ok(int i);
bool sim_pub_returned(int i);
const char *sim_pub_why(int i);
void sim_pub_close(void);
/* Free the round's memory (end of the program). */
void sim_pub_free(void);

/* sim.c: run one seed with bugs switched on; true when every invariant held. */
bool sim_run(uint64_t seed, const sim_bugs_t *bugs, bool trace);
extern int sim_force_workers; /* --workers N, or 0: each seed draws its own count */

/* The broker forgot an acked delivery of id: invariants 1 and 2 look at what is left (sim.c). */
void sim_on_ack(int id);

/* ---------- the worker's fake ports (sim_ports.c) ---------- */
extern const port_consume_ops_t sim_consume_ops;
extern const port_publish_ops_t sim_publish_ops;
extern const port_clock_ops_t sim_clock_ops;
/* The publisher's original of m: message_id m<id>, persistent, its properties in its own pool. */
void sim_props_original(sim_bmsg_t *m);

/* ---------- the worker's own step (sim_life.c): step.c over batch.c, guard.c, settle.c ----------
 */
/* The queue's settings and the relay key, the same for every worker. */
extern conf_queue_t sim_q;
extern copies_keys_t sim_keys;
/* What sim.c shares with them: the txn ops (handler, database; an ordered queue's with the key
 * rows of worker sim.cur's batch) and the crash note. */
extern const txn_ops_t sim_txn_ops, sim_txn_ops_ordered;
order_batch_t *sim_life_order(void);

/* sim.c's side: the successor's pending crash count, the bookkeeping after a transaction, the
 * outbox relay's model, whether a retry's reason is the database's doing. */
bool sim_slot_pending_start(void);
void sim_slot_started(void);
/* Worker k's process was started by the supervisor: its first step reads the crash note. */
void sim_started(int k);
void sim_after_txn(const txn_msg_t *tm, int n);
/* The sweeper (sim_outbox.c): the real outbox relay of every due row. */
void sim_relay(void);
/* The outbox the workers' steps relay (with the simulated table behind it). */
struct outbox *sim_outbox(void);
/* A handler of worker sim.cur wrote an outbox row in this batch (worker_publish). */
void sim_life_published(void);
/* A run starts (the relay's policy) and ends. */
void sim_outbox_begin(void);
void sim_outbox_end(void);
/* The earliest time a waiting outbox row is due again (0: none): the idle clock jumps there. */
uint64_t sim_outbox_next_ms(void);
bool sim_infra_reason(const char *why);

/* A new run (after the seed's options are drawn) / its end. */
void sim_life_begin(void);
void sim_life_end(void);
/* The worker sim.cur died: give up its deliveries (the broker requeues them); a new worker
 * next. */
void sim_life_die(void);
/* One turn of worker sim.cur's loop: step_run, the sweeper when idle; false when idle. A
 * retiring worker drains first (step_drain) and, done, exits (sim_retired). */
bool sim_life_step(void);
/* Worker sim.cur retired: it drained and exits (sim.c); and the same for the modules. */
void sim_retired(void);
void sim_life_exit(void);
/* Ids worker sim.cur committed and has not settled yet (*ids up to max); how many. */
int sim_life_unsettled(int *ids, int max);
/* The ids in worker sim.cur's batch now (for the deaths' bookkeeping); returns how many. */
int sim_life_batch_ids(int *ids, int max);
/* Sizes for invariant 5 and the drain, of worker k. */
int sim_life_held(int k);
int sim_life_batch_n(int k);
bool sim_life_idle(int k);
uint64_t sim_life_held_next_ms(int k);
/* Trace the state the worker's batch is in. */
void sim_life_trace(void);

/* How many live instances of id the broker holds (queues, delay tier, unacked). */
int sim_mq_count(int id);
/* The instance worker k belongs to (0, or 1 with two instances). */
int sim_instance(int k);
/* Deliveries of id unacked on the channels of the workers other than sim.cur (sim.c). */
int sim_other_unacked(int id);

/* ---------- the supervisor (sim_sup.c): sup_step on fake ports ---------- */
struct worker_slot;
/* Worker k's slot (crash note, counters, spans), in the supervisor's slots. */
struct worker_slot *sim_sup_slot(int k);
void sim_sup_begin(void);
void sim_sup_end(void);
/* Each instance's sup_step: reap, the reap rule, restarts, the autoscaler. */
void sim_sup_step(void);
/* Worker k has a supervisor entry / a running process / is retiring. */
bool sim_sup_used(int k);
bool sim_sup_alive(int k);
bool sim_sup_retiring(int k);
/* Worker k's process ended by signal sig (0: exited with code): reaped at the next step. */
void sim_sup_exit(int k, int sig, int code);
/* The signal of the worker whose crash note is in k's slot, as its successor will see it. */
int sim_sup_note_signal(int k);
/* Instance i is killed as a whole; it starts again at step until_step. */
void sim_sup_kill(int i, long until_step);
uint64_t sim_sup_next_ms(void);
bool sim_sup_settled(void);
int sim_sup_live(void);
void sim_sup_time(int k, bool busy, uint64_t ms);
void sim_sup_reload(void);

#endif
