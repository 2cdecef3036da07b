/* worker_txn.c: a worker's transaction ops (db_txn_ops_t) as step.c runs them: the database steps
 * here, the handler calls from worker_handler.c, an ordered queue's key rows from worker_order.c.
 */
#include "worker_int.h"

#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "delivery.h"
#include "log.h"

static unsigned worker_op_exec(void *ctx, const char *sql)
{
    worker_t *w = ctx;
    return db_exec(w->db, sql) == DB_OK ? 0 : mysql_errno(w->db->my);
}

static unsigned worker_op_record(void *ctx, const txn_msg_t *t)
{
    worker_t *w = ctx;
    uint64_t t0 = clock_mono_us();
    unsigned err = db_record(w->db, t->id, t->id_len) == DB_OK ? 0 : db_last_errno(w->db);
    worker_stage_since(w, METRICS_STAGE_INSERT, t0);
    return err;
}

static unsigned worker_op_clear(void *ctx, const txn_msg_t *t)
{
    worker_t *w = ctx;
    return db_attempt_clear(w->db, t->id, t->id_len) == DB_OK ? 0 : db_last_errno(w->db);
}

/* Gather the ids of ms[0..k-1] for db.c's set-based calls. */
static void worker_op_ids(worker_t *w, txn_msg_t *const *ms, int k)
{
    for (int j = 0; j < k; j++) {
        w->ids[j] = ms[j]->id;
        w->id_lens[j] = ms[j]->id_len;
    }
}

static unsigned worker_op_record_many(void *ctx, txn_msg_t *const *ms, int k)
{
    worker_t *w = ctx;
    uint64_t t0 = clock_mono_us();
    worker_op_ids(w, ms, k);
    unsigned err = db_record_many(w->db, w->ids, w->id_lens, k) == DB_OK ? 0 : db_last_errno(w->db);
    worker_stage_since(w, METRICS_STAGE_INSERT, t0);
    return err;
}

static unsigned worker_op_find_records(void *ctx, txn_msg_t *const *ms, int k, bool *found)
{
    worker_t *w = ctx;
    worker_op_ids(w, ms, k);
    return db_find_records(w->db, w->ids, w->id_lens, k, found) == DB_OK ? 0 : db_last_errno(w->db);
}

/* The server's message for the statement that failed last (db_txn_ops_t.error_text). */
static const char *worker_op_error_text(void *ctx)
{
    worker_t *w = ctx;
    return mysql_error(w->db->my);
}

/* The error number of db's last failed call (never 0 after a failure). */
static unsigned worker_op_errno(const worker_t *w)
{
    return w->db->last_errno ? w->db->last_errno : CR_UNKNOWN_ERROR;
}

static unsigned worker_op_begin(void *ctx)
{
    worker_t *w = ctx;
    uint64_t t0 = clock_mono_us();
    unsigned err = db_begin(w->db) == DB_OK ? 0 : worker_op_errno(w);
    worker_stage_since(w, METRICS_STAGE_BEGIN, t0);
    return err;
}

static unsigned worker_op_end(void *ctx, bool commit)
{
    worker_t *w = ctx;
    uint64_t t0 = clock_mono_us();
    unsigned err = db_end(w->db, commit) == DB_OK ? 0 : worker_op_errno(w);
    if (commit)
        worker_stage_since(w, METRICS_STAGE_COMMIT, t0);
    return err;
}

static bool worker_op_held(void *ctx)
{
    worker_t *w = ctx;
    return w->db->boundary == DB_BOUNDARY_XA;
}

const db_txn_ops_t worker_txn_ops = {
    .exec = worker_op_exec,
    .record = worker_op_record,
    .clear_attempts = worker_op_clear,
    .handle = worker_op_handle,
    .record_many = worker_op_record_many,
    .find_records = worker_op_find_records,
    .handle_many = worker_op_handle_many,
    .order = worker_op_order, /* ordered queues only: see worker_txn_wire */
    .error_text = worker_op_error_text,
    .begin = worker_op_begin,
    .end = worker_op_end,
    .held = worker_op_held,
};

/*
 * Put the step together on w's modules, ports and database (after
 * worker_wire), as worker.c runs it: one table of ops, and whether the queue
 * is ordered is data (w->ord.keys): txn.c reads no order op as an unordered
 * queue. hooks (borrowed, static) are the caller's; idemctl try changes what
 * a dry run differs in (record, batch, limit) afterwards.
 */
void worker_txn_wire(worker_t *w, const step_hooks_t *hooks)
{
    bool ordered = w->ord.keys != NULL;
    w->db_ops.txn.order = ordered ? worker_txn_ops.order : NULL;
    w->step = (step_t){.life = &w->life,
                       .bt = &w->bt,
                       .st = &w->st,
                       .guard = &w->guard,
                       .db = {&w->db_ops, w},
                       .record = w->q->dedup == CONF_DEDUP_TABLE,
                       .bulk = !ordered,
                       .batch = w->hx.bmsg != NULL && !ordered,
                       .limit_ms = step_limit_ms(w->conf->broker.heartbeat),
                       .outbox = w->outbox,
                       .pub = w->pub_port,
                       .clock = w->clock,
                       .ids = w->ids,
                       .id_lens = w->id_lens,
                       .hooks = hooks,
                       .hooks_ctx = w};
}
