/* test_txn.c: unit tests of the batch transaction protocol against a scripted database. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "txn.h"
#include "db.h"
#include "tap.h"

/* ---------- a database in miniature ----------
 * Committed rows (records, effects per id) and the open transaction as a
 * list of writes; savepoints are positions in that list. Faults are
 * scripted per step and occurrence; each error does to the transaction
 * what the server does (see NOTES: 1062 and 1205 statement only, or all of
 * it for 1205 with innodb_rollback_on_timeout; 1213 all; 2006/2013 all and
 * the connection is gone). */
enum {
    S_SAVEPOINT,
    S_RECORD,
    S_HANDLER,
    S_ROLLBACK_TO,
    S_RELEASE,
    S_COMMIT,
    S_ROLLBACK,
    S_BULK,
    S_SELECT,
    S_N
};
static const char *step_names[S_N] = {
    "SAVEPOINT", "record INSERT", "handler statement", "ROLLBACK TO",       "RELEASE",
    "COMMIT",    "ROLLBACK",      "multi-row INSERT",  "SELECT of records",
};

#define MAXW 256
#define NIDS 16
#define SP_BATCH (NIDS - 1) /* savepoint "b" of the set-based pass */

typedef struct fdb {
    int rec_committed[NIDS], eff_committed[NIDS];
    struct {
        int kind, id, key; /* kind 0 record, 1 effect, 2 key blocked on id, 3 id waits on key */
    } w[MAXW];
    int nw;
    int sp[NIDS]; /* savepoint m<i>: position in w, or -1 */
    bool rollback_on_timeout, dead;
    bool commit_lost_applies; /* a 2013 at COMMIT: did the server commit? */
    int fault_step, fault_nth, fault_err, fault_times; /* fail occurrence nth.. of step */
    int seen[S_N];
    int handler_calls[NIDS];
    bool held_by_other[NIDS]; /* the record's key is locked by another transaction: 1205 */
    bool nontrans;            /* the transaction wrote a table without savepoints (Aria) */
    /* An XA branch (f_ops_xa): once the server rolled it back (1213, or 1205 with
     * innodb_rollback_on_timeout) every later statement and its end get rb (1614 after a
     * deadlock, 1613 after a timeout) until the ROLLBACK. */
    bool xa;
    unsigned rb;
    int eff_nontrans[NIDS]; /* ... its writes there: never rolled back */
    /* Another worker commits late[late_i++] right after each record SELECT (its snapshot
     * does not show it), so that the next INSERT clashes again. */
    int late[NIDS], nlate, late_i;
    /* A multi-row INSERT that met a committed id took shared locks on it (and the gap before
     * it) that only the transaction's end frees: statements run while they are held. */
    bool dup_locks;
    int dup_lock_stmts;
} fdb_t;

/* How each test message's handler behaves. */
/* H_END: the handler's COMMIT is refused inside idemd's XA branch (1399) every time, and it
 * answers ok: its write stands in the transaction, nothing is committed by it. */
/* H_COMMITS / H_ROLLS_BACK: where the server cannot refuse (checked), the handler COMMITs or
 * ROLLBACKs idemd's transaction, answers ok, and the flags show it (DB_ER_TXN_ENDED). */
enum {
    H_OK,
    H_RETRY,
    H_REJECT,
    H_OK_IGNORING,
    H_NOSQL,
    H_NONTRANS,
    H_END,
    H_COMMITS,
    H_ROLLS_BACK
};
static int behaviour[NIDS];
static unsigned clears[NIDS];

static void fdb_reset_tx(fdb_t *d)
{
    d->nw = 0;
    d->nontrans = false;
    d->dup_locks = false;
    for (int i = 0; i < NIDS; i++)
        d->sp[i] = -1;
}

static void fdb_init(fdb_t *d)
{
    memset(d, 0, sizeof(*d));
    fdb_reset_tx(d);
    d->fault_step = -1;
}

/* The scripted error for this occurrence of step, applied to the transaction. */
static unsigned fdb_fault(fdb_t *d, int step)
{
    if (d->dead)
        return 2006;
    if (d->rb && step != S_ROLLBACK)
        return d->rb;
    if (d->dup_locks && step != S_ROLLBACK)
        d->dup_lock_stmts++;
    int k = ++d->seen[step];
    if (step != d->fault_step || k < d->fault_nth || k >= d->fault_nth + d->fault_times)
        return 0;
    unsigned e = (unsigned)d->fault_err;
    if (e == 1213 || (e == 1205 && d->rollback_on_timeout)) {
        fdb_reset_tx(d);
        if (d->xa && step != S_COMMIT)
            d->rb = e == 1213 ? 1614 : 1613;
    }
    if (e == 2006 || e == 2013) {
        if (step == S_COMMIT && d->commit_lost_applies)
            return 0xC0; /* handled by the caller: committed, then lost */
        fdb_reset_tx(d);
        d->dead = true;
    }
    return e;
}

/* Ordered queues: committed blocks (head per key, -1: free) and waiters (in order). */
static int blk_head[NIDS];
static int waiters[NIDS], n_waiters;

static void fdb_commit(fdb_t *d)
{
    for (int i = 0; i < d->nw; i++) {
        if (d->w[i].kind == 2)
            blk_head[d->w[i].key] = d->w[i].id;
        else if (d->w[i].kind == 3)
            waiters[n_waiters++] = d->w[i].id;
        else
            (d->w[i].kind == 0 ? d->rec_committed : d->eff_committed)[d->w[i].id]++;
    }
    fdb_reset_tx(d);
}

static unsigned f_exec(void *ctx, const char *sql)
{
    fdb_t *d = ctx;
    int i;
    unsigned e;
    if (strcmp(sql, "SAVEPOINT b") == 0)
        sql = "SAVEPOINT m15";
    else if (strcmp(sql, "RELEASE SAVEPOINT b") == 0)
        sql = "RELEASE SAVEPOINT m15";
    if (strcmp(sql, "SAVEPOINT o") == 0)
        sql = "SAVEPOINT m14";
    /* 1178 as the server says it after a write to a table without savepoints (Aria). */
    if (strncmp(sql, "SAVEPOINT ", 10) == 0 && d->nontrans && !d->dead)
        return 1178;
    if (strcmp(sql, "SAVEPOINT e") ==
        0) /* the check after the handlers: nothing rolls back to it */
        return d->dead ? 2006 : d->rb;
    else if (strcmp(sql, "RELEASE SAVEPOINT o") == 0)
        sql = "RELEASE SAVEPOINT m14";
    if (sscanf(sql, "SAVEPOINT m%d", &i) == 1) {
        if ((e = fdb_fault(d, S_SAVEPOINT)) != 0)
            return e;
        d->sp[i] = d->nw;
        return 0;
    }
    if (sscanf(sql, "ROLLBACK TO SAVEPOINT m%d", &i) == 1) {
        if ((e = fdb_fault(d, S_ROLLBACK_TO)) != 0)
            return e;
        if (d->sp[i] < 0)
            return 1305;
        d->nw = d->sp[i];
        for (int j = 0; j < NIDS; j++)
            if (d->sp[j] > d->nw)
                d->sp[j] = -1;
        return 0;
    }
    if (sscanf(sql, "RELEASE SAVEPOINT m%d", &i) == 1) {
        if ((e = fdb_fault(d, S_RELEASE)) != 0)
            return e;
        if (d->sp[i] < 0)
            return 1305;
        d->sp[i] = -1;
        return 0;
    }
    if (strcmp(sql, "COMMIT") == 0) {
        if (d->rb && !d->dead) { /* XA END refuses a branch the server rolled back */
            e = d->rb;
            d->rb = 0;
            fdb_reset_tx(d);
            return e;
        }
        e = fdb_fault(d, S_COMMIT);
        if (e == 0xC0) {
            fdb_commit(d);
            d->dead = true;
            return 2013;
        }
        if (e != 0)
            return e;
        fdb_commit(d);
        return 0;
    }
    if (strcmp(sql, "ROLLBACK") == 0) {
        d->rb = 0;
        e = fdb_fault(d, S_ROLLBACK);
        fdb_reset_tx(d);
        return e;
    }
    fprintf(stderr, "unexpected SQL %s\n", sql);
    abort();
}

static int f_id(const txn_msg_t *m)
{
    return atoi(m->id + 1); /* ids are "m<N>" */
}

static unsigned f_record(void *ctx, const txn_msg_t *m)
{
    fdb_t *d = ctx;
    int id = f_id(m);
    unsigned e = fdb_fault(d, S_RECORD);
    if (e)
        return e;
    if (d->held_by_other[id]) {
        if (d->rollback_on_timeout) {
            fdb_reset_tx(d);
            d->rb = d->xa ? 1613 : 0;
        }
        return 1205;
    }
    if (d->rec_committed[id])
        return 1062;
    for (int i = 0; i < d->nw; i++)
        if (d->w[i].kind == 0 && d->w[i].id == id)
            return 1062;
    d->w[d->nw].kind = 0;
    d->w[d->nw++].id = id;
    return 0;
}

static bool f_has_record(const fdb_t *d, int id)
{
    if (d->rec_committed[id])
        return true;
    for (int i = 0; i < d->nw; i++)
        if (d->w[i].kind == 0 && d->w[i].id == id)
            return true;
    return false;
}

static unsigned f_record_many(void *ctx, txn_msg_t *const *ms, int k)
{
    fdb_t *d = ctx;
    unsigned e = fdb_fault(d, S_BULK);
    if (e)
        return e;
    for (int j = 0; j < k; j++) {
        int id = f_id(ms[j]);
        if (d->held_by_other[id]) {
            if (d->rollback_on_timeout) {
                fdb_reset_tx(d);
                d->rb = d->xa ? 1613 : 0;
            }
            return 1205;
        }
        if (f_has_record(d, id)) {
            d->dup_locks = d->dup_locks || d->rec_committed[id] > 0;
            return 1062; /* the whole statement is rolled back, not its locks */
        }
    }
    for (int j = 0; j < k; j++) {
        d->w[d->nw].kind = 0;
        d->w[d->nw++].id = f_id(ms[j]);
    }
    return 0;
}

static unsigned f_find_records(void *ctx, txn_msg_t *const *ms, int k, bool *found)
{
    fdb_t *d = ctx;
    unsigned e = fdb_fault(d, S_SELECT);
    if (e)
        return e;
    for (int j = 0; j < k; j++)
        found[j] = d->rec_committed[f_id(ms[j])] > 0;
    if (d->late_i < d->nlate) {
        int id = d->late[d->late_i++];
        d->rec_committed[id] = d->eff_committed[id] = 1;
    }
    return 0;
}

static unsigned f_clear(void *ctx, const txn_msg_t *m)
{
    (void)ctx;
    clears[f_id(m)]++;
    return 0;
}

static idemd_result_t f_handle(void *ctx, int i, txn_msg_t *m, unsigned *err)
{
    fdb_t *d = ctx;
    int id = f_id(m);
    (void)i;
    d->handler_calls[id]++;
    if (behaviour[id] == H_NOSQL)
        return IDEMD_RESULT_OK;
    if (behaviour[id] == H_NONTRANS) {
        d->eff_nontrans[id]++;
        d->nontrans = true;
        return IDEMD_RESULT_OK;
    }
    unsigned e = fdb_fault(d, S_HANDLER);
    if (e == 0 && behaviour[id] == H_END)
        e = 1399;
    if (e == 0 && (behaviour[id] == H_COMMITS || behaviour[id] == H_ROLLS_BACK)) {
        if (behaviour[id] == H_COMMITS)
            fdb_commit(d);
        else
            fdb_reset_tx(d);
        *err = DB_ER_TXN_ENDED;
        return IDEMD_RESULT_OK;
    }
    *err = e;
    if (e == 0) {
        d->w[d->nw].kind = 1;
        d->w[d->nw++].id = id;
    }
    switch (behaviour[id]) {
    case H_RETRY:
        snprintf(m->reason, sizeof(m->reason), "test retry");
        return IDEMD_RESULT_RETRY;
    case H_REJECT:
        return IDEMD_RESULT_REJECT;
    case H_OK_IGNORING:
        return IDEMD_RESULT_OK;
    default:
        if (e) {
            snprintf(m->reason, sizeof(m->reason), "statement failed: %u", e);
            return IDEMD_RESULT_RETRY; /* a well-behaved handler */
        }
        return IDEMD_RESULT_OK;
    }
}

/* The batch handler: every message's statement and verdict as f_handle, in one call. */
static bool batch_fails;
static bool batch_poisoned; /* the call fails as a whole when it holds a message that H_REJECTs */
static bool f_dead(void *ctx)
{
    return ((fdb_t *)ctx)->dead;
}

static int f_handle_many(void *ctx, txn_msg_t *const *ms, int k, idemd_result_t *r, unsigned *err)
{
    bool poisoned = false;
    for (int j = 0; j < k && batch_poisoned; j++)
        poisoned |= behaviour[f_id(ms[j])] == H_REJECT;
    if (batch_fails || poisoned) {
        snprintf(ms[0]->reason, sizeof(ms[0]->reason), "test batch failure");
        return -1;
    }
    for (int j = 0; j < k; j++) {
        unsigned e = 0;
        r[j] = f_handle(ctx, 0, ms[j], &e);
        if (e && !*err)
            *err = e;
        if (f_dead(ctx))
            return -1;
    }
    return 0;
}

static uint64_t clock_ms;
static uint64_t f_now(void *ctx)
{
    fdb_t *d = ctx;
    return clock_ms + (uint64_t)d->handler_calls[0] * 0 + (uint64_t)d->seen[S_SAVEPOINT] * 100;
}

static const char *f_error_text(void *ctx)
{
    (void)ctx;
    return "The storage engine for the table doesn't support SAVEPOINT";
}

static const db_txn_ops_t f_ops = {f_exec,        f_record,       f_clear,       f_handle,
                                   f_record_many, f_find_records, f_handle_many, NULL,
                                   f_error_text,  NULL,           NULL,          NULL};
/* idemd's transaction as an XA branch (db_txn_ops_t.held): the server refuses its end. */
static bool f_held(void *ctx)
{
    return ((fdb_t *)ctx)->xa;
}
static const db_txn_ops_t f_ops_xa = {f_exec,        f_record,       f_clear,       f_handle,
                                      f_record_many, f_find_records, f_handle_many, NULL,
                                      f_error_text,  NULL,           NULL,          f_held};
static const port_clock_ops_t f_clock = {.now_ms = f_now};

/* Ordered queues: message i's key; the block a key has in the open transaction or committed. */
static int keys[NIDS];
static int f_head(const fdb_t *d, int key)
{
    int h = blk_head[key];
    for (int i = 0; i < d->nw; i++)
        if (d->w[i].kind == 2 && d->w[i].key == key)
            h = d->w[i].id;
    return h;
}

/* db_txn_ops_t.order over the miniature: blocks and waiters are writes, undone with the rest. */
static unsigned f_order(void *ctx, int i, txn_msg_t *m, txn_order_step_t step, bool *wait)
{
    fdb_t *d = ctx;
    *wait = false;
    if (step == TXN_ORDER_PASS)
        return 0;
    int id = f_id(m), k = keys[i], h = f_head(d, k);
    switch (step) {
    case TXN_ORDER_CHECK:
        *wait = h >= 0 && h != id;
        return 0;
    case TXN_ORDER_WAIT:
        d->w[d->nw].kind = 3;
        d->w[d->nw].key = k;
        d->w[d->nw++].id = id;
        return 0;
    case TXN_ORDER_FAILED:
        if (txn_route(m, 3, true) == TXN_ROUTE_DELAY && h < 0) {
            d->w[d->nw].kind = 2;
            d->w[d->nw].key = k;
            d->w[d->nw++].id = id;
        }
        return 0;
    default:
        return 0;
    }
}

static const db_txn_ops_t f_ops_ordered = {f_exec,        f_record,       f_clear,       f_handle,
                                           f_record_many, f_find_records, f_handle_many, f_order,
                                           NULL,          NULL,           NULL,          NULL};

static fdb_t db;
static txn_msg_t msgs[NIDS];
static txn_t tx;

/* txn_t.dry_peek: how often it ran, and the open transaction's writes it saw. */
static int peeked, peek_writes;
static void f_peek(void *ctx)
{
    peeked++;
    peek_writes = ((fdb_t *)ctx)->nw;
}

/* A batch of n messages m0..m<n-1> with the given behaviours. */
static void setup(int n, const int *beh)
{
    fdb_init(&db);
    memset(msgs, 0, sizeof(msgs));
    memset(clears, 0, sizeof(clears));
    for (int i = 0; i < n; i++) {
        snprintf(msgs[i].id, sizeof(msgs[i].id), "m%d", i);
        msgs[i].id_len = strlen(msgs[i].id);
        msgs[i].attempt = 1;
        behaviour[i] = beh ? beh[i] : H_OK;
    }
    memset(&tx, 0, sizeof(tx));
    for (int i = 0; i < NIDS; i++) {
        blk_head[i] = -1;
        keys[i] = 0;
    }
    n_waiters = 0;
    batch_fails = false;
    batch_poisoned = false;
    tx.ops = &f_ops;
    tx.ctx = &db;
    tx.clock = (port_clock_t){&f_clock, &db};
    tx.record = true;
    tx.m = msgs;
    tx.n = n;
}

static void fault(int step, int nth, int err, int times)
{
    db.fault_step = step;
    db.fault_nth = nth;
    db.fault_err = err;
    db.fault_times = times;
}

/*
 * What must hold after any run: acked (committed or duplicate) means the
 * effect is committed exactly once; nothing else has a committed effect or
 * record; no message is left half-way. Returns true when it holds.
 */
static bool invariants(txn_status_t st, const char *ctx)
{
    bool ok = true;
    for (int i = 0; i < tx.n; i++) {
        txn_msg_t *m = &msgs[i];
        if (st == TXN_FATAL)
            continue; /* nothing is acked; redelivery and the record decide */
        if (m->state == TXN_RECORDED || m->state == TXN_HANDLED) {
            printf("# %s: m%d left in state %d\n", ctx, i, m->state);
            ok = false;
        }
        bool acked = txn_route(m, 3, true) == TXN_ROUTE_ACK;
        if (m->state == TXN_COMMITTED && (db.eff_committed[i] != 1 || db.rec_committed[i] != 1)) {
            printf("# %s: m%d acked with %d effects, %d records committed\n", ctx, i,
                   db.eff_committed[i], db.rec_committed[i]);
            ok = false;
        }
        if (m->state == TXN_DUPLICATE && db.rec_committed[i] == 0) {
            printf("# %s: m%d acked as a duplicate of nothing\n", ctx, i);
            ok = false;
        }
        if (!acked && (db.eff_committed[i] || db.rec_committed[i])) {
            printf("# %s: m%d not acked (state %d) but its effect is committed\n", ctx, i,
                   m->state);
            ok = false;
        }
    }
    return ok;
}

static int count_state(txn_state_t s)
{
    int k = 0;
    for (int i = 0; i < tx.n; i++)
        k += msgs[i].state == s;
    return k;
}

int main(void)
{
    static const int errs[] = {1062, 1205, 1213, 1305, 2006, 2013};
    txn_status_t st;
    char what[160];

    log_set_level(LOG_LEVEL_ERROR); /* the redo lines would drown the TAP output */

    /* The happy path: one transaction, all committed, no redo. */
    setup(3, NULL);
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 3 && tx.redos == 0 &&
           db.seen[S_COMMIT] == 1 && invariants(st, "happy"),
       "three ok messages commit once together");

    /* idemctl try: a dry run goes through the same savepoints and handlers, then ROLLBACK
     * where COMMIT would be, after its peek; nothing is committed, ok messages stay HANDLED. */
    for (int bulk = 0; bulk <= 1; bulk++) {
        int beh[3] = {H_OK, H_REJECT, H_OK};
        setup(3, beh);
        tx.bulk = bulk;
        tx.dry_run = true;
        tx.dry_peek = f_peek;
        peeked = 0;
        st = txn_run(&tx);
        ok(st == TXN_DONE && db.seen[S_COMMIT] == 0 && peeked == 1 && peek_writes > 0 &&
               db.nw == 0 && db.eff_committed[0] == 0 && db.rec_committed[0] == 0 &&
               db.eff_committed[2] == 0 && msgs[0].state == TXN_HANDLED &&
               msgs[1].state == TXN_REJECT && msgs[2].state == TXN_HANDLED && !tx.committed,
           "dry run (bulk=%d): handlers ran, peeked once in the open transaction, no COMMIT, "
           "nothing committed",
           bulk);
    }

    /* Issue 8a: 1205 on C's record with innodb_rollback_on_timeout = ON took A's and B's
     * effects with it; A and B must not be acked on an empty COMMIT. */
    for (int on = 0; on <= 1; on++) {
        setup(3, NULL);
        db.rollback_on_timeout = on;
        db.held_by_other[2] = true;
        st = txn_run(&tx);
        snprintf(what, sizeof(what), "1205 on C's record, rollback_on_timeout=%d", on);
        ok(st == TXN_DONE && msgs[0].state == TXN_COMMITTED && msgs[1].state == TXN_COMMITTED &&
               msgs[2].state == TXN_RETRY && db.eff_committed[0] == 1 && db.eff_committed[1] == 1 &&
               db.handler_calls[2] == 0 && tx.lock_waits == 1 && invariants(st, what),
           "%s: A and B committed once, C retried, handler of C not run", what);
        ok(tx.redos == on, "%s: %d redo(s)", what, on);
    }

    /* 1205 inside C's handler (a business row held), rollback_on_timeout on and off. */
    for (int on = 0; on <= 1; on++) {
        setup(3, NULL);
        db.rollback_on_timeout = on;
        fault(S_HANDLER, 3, 1205, 1);
        st = txn_run(&tx);
        snprintf(what, sizeof(what), "1205 in C's handler, rollback_on_timeout=%d", on);
        ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 2 && msgs[2].state == TXN_RETRY &&
               invariants(st, what),
           "%s: A and B committed, C retried", what);
    }

    /* A handler that ignores a deadlock and answers ok: the rest of the batch would run in
     * a new transaction without the records before it. */
    {
        int beh[3] = {H_OK, H_OK_IGNORING, H_OK};
        setup(3, beh);
        fault(S_HANDLER, 2, 1213, 1);
        st = txn_run(&tx);
        ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 3 && tx.redos == 1 &&
               invariants(st, "ignored deadlock"),
           "handler ignoring 1213: batch redone, every effect once");
    }
    /* The same alone and in the set-based pass, checked (the savepoint gone shows it) and as
     * an XA branch (no savepoint: the branch refuses the next statement). */
    for (int xa = 0; xa <= 1; xa++)
        for (int n = 1; n <= 3; n += 2) {
            int beh[3] = {H_OK_IGNORING, H_OK_IGNORING, H_OK_IGNORING};
            setup(n, beh);
            if (xa) {
                tx.ops = &f_ops_xa;
                db.xa = true;
            }
            tx.bulk = true;
            fault(S_HANDLER, n == 1 ? 1 : 2, 1213, 1);
            st = txn_run(&tx);
            snprintf(what, sizeof(what), "ignored deadlock, %d message(s), xa %d", n, xa);
            ok(st == TXN_DONE && count_state(TXN_COMMITTED) == n && tx.redos == 1 &&
                   invariants(st, what),
               "%s: redone, every effect once", what);
        }
    /* In a branch the pass takes no savepoint of its own: a message alone none at all, the
     * set-based pass none before its records; both end without a RELEASE. */
    for (int n = 1; n <= 3; n += 2) {
        setup(n, NULL);
        tx.ops = &f_ops_xa;
        db.xa = true;
        tx.bulk = true;
        st = txn_run(&tx);
        ok(st == TXN_DONE && count_state(TXN_COMMITTED) == n && db.seen[S_SAVEPOINT] == 0 &&
               db.seen[S_RELEASE] == 0 && db.seen[S_COMMIT] == 1 && invariants(st, "xa"),
           "XA branch, %d message(s): committed with no savepoint and no RELEASE", n);
    }
    {
        int beh[1] = {H_RETRY};
        setup(1, beh);
        tx.ops = &f_ops_xa;
        db.xa = true;
        st = txn_run(&tx);
        ok(st == TXN_DONE && msgs[0].state == TXN_RETRY && db.seen[S_ROLLBACK_TO] == 0 &&
               db.seen[S_ROLLBACK] == 1 && db.eff_committed[0] == 0 && db.rec_committed[0] == 0 &&
               invariants(st, "xa alone retried"),
           "XA branch, a message alone that fails: the pass's ROLLBACK undoes it, nothing kept");
    }

    /* A handler whose COMMIT (or DDL, ...) the server refused inside idemd's XA branch
     * (1399), then answered ok: that message fails and is rolled back; the rest commit. */
    {
        int beh[3] = {H_OK, H_OK_IGNORING, H_OK};
        setup(3, beh);
        fault(S_HANDLER, 2, 1399, 1);
        st = txn_run(&tx);
        ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 2 && msgs[1].state == TXN_RETRY &&
               strstr(msgs[1].reason, "tried to end idemd's transaction") != NULL &&
               tx.refused == 1 && invariants(st, "refused end"),
           "handler whose end of the transaction was refused (1399): it is retried, the rest "
           "commit");
    }
    /* The same in a set-based batch with handle_batch: the refusal names no message, so the
     * batch runs one by one, where the one at fault is retried and the rest commit. */
    {
        int beh[3] = {H_OK, H_END, H_OK};
        setup(3, beh);
        tx.bulk = true;
        tx.batch = true;
        st = txn_run(&tx);
        ok(st == TXN_DONE && tx.fell_back && count_state(TXN_COMMITTED) == 2 &&
               msgs[1].state == TXN_RETRY && tx.refused == 1 &&
               invariants(st, "refused end, batch"),
           "handle_batch whose end of the transaction was refused: one by one, that message "
           "retried, the rest commit");
    }
    /* Where the server cannot refuse (Galera), the flags show the end after the call: the
     * run is FATAL and says which message's handler did it; nothing is committed by idemd. */
    {
        int beh[3] = {H_OK, H_COMMITS, H_OK};
        setup(3, beh);
        st = txn_run(&tx);
        ok(st == TXN_FATAL && tx.ended && tx.ended_at == 1 && !tx.committed &&
               strstr(tx.ended_why, "ended idemd's transaction") != NULL,
           "handler that committed the transaction (flags): FATAL, named, nothing committed by "
           "idemd after it");
    }
    /* A ROLLBACK of the handler's (the flags show the end, no record of the batch is
     * committed): that message is retried, the rest redone and committed, no hold. */
    {
        int beh[3] = {H_OK, H_ROLLS_BACK, H_OK};
        setup(3, beh);
        st = txn_run(&tx);
        ok(st == TXN_DONE && !tx.ended && count_state(TXN_COMMITTED) == 2 &&
               msgs[1].state == TXN_RETRY && strstr(msgs[1].reason, "with a rollback") != NULL &&
               invariants(st, "handler rollback"),
           "handler that rolled the transaction back (flags): it is retried, the rest commit");
    }

    /* Issue 8p: a handler that does no SQL (dedup = "none") is not a lost transaction. */
    {
        int beh[3] = {H_NOSQL, H_NOSQL, H_NOSQL};
        setup(3, beh);
        tx.record = false;
        st = txn_run(&tx);
        ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 3 && tx.redos == 0 &&
               db.handler_calls[0] == 1,
           "dedup none, handlers without SQL: committed, no redo, each handler once");
    }

    /* Galera: certification conflict at COMMIT is a redo. */
    setup(3, NULL);
    fault(S_COMMIT, 1, 1213, 1);
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 3 && tx.redos == 1 &&
           invariants(st, "1213 at COMMIT"),
       "1213 at COMMIT: redone once, committed once");

    /* A deadlock every time: bounded, then every message is retried, nothing committed. */
    setup(3, NULL);
    fault(S_RECORD, 1, 1213, 1000);
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_RETRY) == 3 && tx.redos == TXN_REDO_MAX &&
           invariants(st, "deadlock forever"),
       "deadlock on every pass: %d passes, all retried, nothing committed", TXN_REDO_MAX);

    /* A lost COMMIT reply: outcome unknown, nothing may be acked, whatever the server did. */
    for (int applies = 0; applies <= 1; applies++) {
        setup(2, NULL);
        db.commit_lost_applies = applies;
        fault(S_COMMIT, 1, 2013, 1);
        st = txn_run(&tx);
        ok(st == TXN_FATAL, "2013 at COMMIT (server %s): fatal, nothing acked",
           applies ? "committed" : "did not commit");
    }

    /* Duplicates: already committed, and the same id twice in one batch. */
    setup(3, NULL);
    db.rec_committed[1] = 1;
    db.eff_committed[1] = 1;
    st = txn_run(&tx);
    ok(st == TXN_DONE && msgs[1].state == TXN_DUPLICATE && db.handler_calls[1] == 0 &&
           db.eff_committed[1] == 1 && msgs[0].state == TXN_COMMITTED,
       "committed id: duplicate, handler not run");
    setup(3, NULL);
    strcpy(msgs[2].id, "m0");
    st = txn_run(&tx);
    ok(st == TXN_DONE && msgs[0].state == TXN_COMMITTED && msgs[2].state == TXN_DUPLICATE &&
           db.eff_committed[0] == 1 && db.handler_calls[0] == 1,
       "same id twice in a batch: first committed, second duplicate");

    /* Retry and reject roll back only their own message. */
    {
        int beh[4] = {H_OK, H_RETRY, H_REJECT, H_OK};
        setup(4, beh);
        st = txn_run(&tx);
        ok(st == TXN_DONE && msgs[1].state == TXN_RETRY && msgs[2].state == TXN_REJECT &&
               db.eff_committed[1] == 0 && db.eff_committed[2] == 0 &&
               count_state(TXN_COMMITTED) == 2 && invariants(st, "retry+reject") &&
               strcmp(msgs[1].reason, "test retry") == 0 && msgs[2].reason[0],
           "retry and reject: their effects rolled back, the others committed");
        ok(txn_route(&msgs[1], 3, true) == TXN_ROUTE_DELAY &&
               txn_route(&msgs[2], 3, true) == TXN_ROUTE_DLQ &&
               txn_route(&msgs[2], 3, false) == TXN_ROUTE_BROKER,
           "routes: retry to a delay tier, reject to the DLQ or the broker");
        msgs[1].attempt = 3;
        ok(txn_route(&msgs[1], 3, true) == TXN_ROUTE_DLQ, "last attempt: retry goes to DLQ");
    }

    /* Nothing handled: no COMMIT at all. */
    {
        int beh[2] = {H_RETRY, H_RETRY};
        setup(2, beh);
        st = txn_run(&tx);
        ok(st == TXN_DONE && db.seen[S_COMMIT] == 0 && db.seen[S_ROLLBACK] == 1,
           "no message handled: ROLLBACK, no COMMIT");
    }

    /* A crash-guard count is cleared with the effects, in the same transaction. */
    setup(1, NULL);
    msgs[0].counted = true;
    st = txn_run(&tx);
    ok(st == TXN_DONE && clears[0] == 1 && msgs[0].state == TXN_COMMITTED,
       "counted message: attempts row cleared in its transaction");

    /* Issue 8n: a batch that runs past its limit commits what it did, keeps the rest. */
    setup(6, NULL);
    tx.limit_ms = 250; /* the fake clock moves 100 ms per SAVEPOINT */
    st = txn_run(&tx);
    ok(st == TXN_DONE && tx.cut_short && count_state(TXN_COMMITTED) == 3 &&
           count_state(TXN_NEW) == 3 && txn_route(&msgs[5], 3, true) == TXN_ROUTE_DEFER &&
           db.handler_calls[4] == 0 && invariants(st, "cut short"),
       "limit passed: 3 committed, 3 held unstarted");

    /* Issue 10: the set-based pass. */
    setup(4, NULL);
    tx.bulk = true;
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 4 && db.seen[S_BULK] == 1 &&
           db.seen[S_RECORD] == 0 && db.seen[S_SAVEPOINT] == 1 && !tx.fell_back &&
           invariants(st, "set-based"),
       "set-based: one multi-row INSERT, one savepoint, all committed");
    setup(4, NULL);
    tx.bulk = true;
    db.rec_committed[1] = db.eff_committed[1] = 1;
    db.rec_committed[3] = db.eff_committed[3] = 1;
    st = txn_run(&tx);
    ok(st == TXN_DONE && msgs[1].state == TXN_DUPLICATE && msgs[3].state == TXN_DUPLICATE &&
           count_state(TXN_COMMITTED) == 2 && db.seen[S_BULK] == 2 && db.seen[S_SELECT] == 1 &&
           db.handler_calls[1] == 0 && !tx.fell_back && invariants(st, "set-based dups"),
       "set-based: committed ids found by one SELECT, the rest inserted");
    ok(tx.found_dups, "set-based: ids found recorded are reported (the next batch looks first)");
    ok(db.dup_lock_stmts == 0 && db.seen[S_ROLLBACK] == 1,
       "set-based: the INSERT that met recorded ids is rolled back before the lookup (the locks "
       "it took on them are not held through the rest of the batch)");
    setup(4, NULL);
    tx.bulk = tx.look_first = true;
    db.rec_committed[1] = db.eff_committed[1] = 1;
    st = txn_run(&tx);
    ok(st == TXN_DONE && msgs[1].state == TXN_DUPLICATE && count_state(TXN_COMMITTED) == 3 &&
           db.seen[S_SELECT] == 1 && db.seen[S_BULK] == 1 && db.handler_calls[1] == 0 &&
           tx.found_dups && !tx.fell_back && invariants(st, "look first"),
       "set-based, looking first: one SELECT, then one INSERT without the recorded id");
    setup(4, NULL);
    tx.bulk = tx.look_first = true;
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 4 && db.seen[S_SELECT] == 1 &&
           db.seen[S_BULK] == 1 && !tx.found_dups && invariants(st, "look first, none"),
       "set-based, looking first and finding none: all committed, the next batch inserts first");
    setup(3, NULL);
    tx.bulk = tx.look_first = true;
    for (int i = 0; i < 3; i++)
        db.rec_committed[i] = db.eff_committed[i] = 1;
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_DUPLICATE) == 3 && db.seen[S_BULK] == 0 &&
           db.seen[S_COMMIT] == 0 && db.handler_calls[0] == 0 && invariants(st, "all recorded"),
       "set-based, looking first and finding every id: no INSERT, no handler, nothing committed");
    /* Each SELECT misses an id another worker commits just after it: the INSERT clashes
     * again, three times in all, and the batch goes message by message (not FATAL). */
    setup(5, NULL);
    tx.bulk = true;
    db.rec_committed[0] = db.eff_committed[0] = 1;
    db.late[0] = 1, db.late[1] = 2, db.late[2] = 3, db.nlate = 3;
    st = txn_run(&tx);
    ok(st == TXN_DONE && tx.fell_back && count_state(TXN_DUPLICATE) == 4 &&
           msgs[4].state == TXN_COMMITTED && db.eff_committed[4] == 1 && db.handler_calls[3] == 0 &&
           db.seen[S_BULK] == 4 && invariants(st, "clash x4"),
       "set-based: an INSERT that clashes with a new commit after each of three lookups falls "
       "back to message by message, and the batch is done");
    setup(3, NULL);
    tx.bulk = true;
    strcpy(msgs[2].id, "m0");
    st = txn_run(&tx);
    ok(st == TXN_DONE && msgs[0].state == TXN_COMMITTED && msgs[2].state == TXN_DUPLICATE &&
           db.eff_committed[0] == 1 && db.handler_calls[0] == 1 && !tx.fell_back,
       "set-based: an id repeated in the batch is resolved in memory");
    {
        int beh[4] = {H_OK, H_RETRY, H_OK, H_REJECT};
        setup(4, beh);
        tx.bulk = true;
        st = txn_run(&tx);
        ok(st == TXN_DONE && tx.fell_back && msgs[1].state == TXN_RETRY &&
               msgs[3].state == TXN_REJECT && count_state(TXN_COMMITTED) == 2 &&
               db.handler_calls[1] == 1 && db.eff_committed[1] == 0 && db.eff_committed[3] == 0 &&
               invariants(st, "set-based fallback"),
           "set-based: a failing message falls back to savepoints, its effects never commit");
    }
    setup(3, NULL);
    tx.bulk = true;
    db.held_by_other[1] = true;
    st = txn_run(&tx);
    ok(st == TXN_DONE && tx.fell_back && msgs[1].state == TXN_RETRY &&
           count_state(TXN_COMMITTED) == 2 && invariants(st, "set-based lock wait"),
       "set-based: a held key falls back; that message retried, the others committed");

    /* Issue 10: the batch handler (handle_batch) with per-message verdicts. */
    setup(5, NULL);
    tx.bulk = tx.batch = true;
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 5 && tx.batch_calls == 1 &&
           db.seen[S_BULK] == 1 && invariants(st, "batch handler"),
       "batch handler: one call, one INSERT, all committed");
    {
        int beh[5] = {H_OK, H_REJECT, H_OK, H_RETRY, H_OK};
        setup(5, beh);
        tx.bulk = tx.batch = true;
        st = txn_run(&tx);
        ok(st == TXN_DONE && tx.batch_calls == 2 && msgs[1].state == TXN_REJECT &&
               msgs[3].state == TXN_RETRY && count_state(TXN_COMMITTED) == 3 &&
               db.eff_committed[1] == 0 && db.eff_committed[3] == 0 && db.handler_calls[1] == 1 &&
               db.handler_calls[0] == 2 && !tx.fell_back && invariants(st, "batch verdicts"),
           "batch handler: failed verdicts rolled back, called again without them");
    }
    setup(3, NULL);
    tx.bulk = tx.batch = true;
    batch_fails = true;
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 3 && tx.fell_back && tx.batch_calls == 1 &&
           db.handler_calls[0] == 1 && db.handler_calls[2] == 1 && db.eff_committed[2] == 1 &&
           invariants(st, "batch failure"),
       "batch handler failing as a whole: every message runs alone through handle(), all "
       "committed");
    {
        int beh[5] = {H_OK, H_OK, H_REJECT, H_OK, H_OK};
        setup(5, beh);
        tx.bulk = tx.batch = true;
        batch_poisoned = true;
        st = txn_run(&tx);
        ok(st == TXN_DONE && msgs[2].state == TXN_REJECT && count_state(TXN_COMMITTED) == 4 &&
               tx.fell_back && tx.batch_calls == 1 && db.eff_committed[2] == 0 &&
               db.eff_committed[0] == 1 && db.eff_committed[4] == 1 &&
               invariants(st, "poisoned batch"),
           "batch handler failing as a whole on one poisoned message: only that message "
           "gets a verdict, the others are committed once");
    }

    /* txn_test_no_fallback puts back the old handling of a failed handle_batch, for the
     * simulator to catch: the whole batch is retried, the innocent with the guilty. */
    {
        int beh[5] = {H_OK, H_OK, H_REJECT, H_OK, H_OK};
        setup(5, beh);
        tx.bulk = tx.batch = true;
        batch_poisoned = true;
        txn_test_no_fallback = true;
        st = txn_run(&tx);
        txn_test_no_fallback = false;
        is_int(count_state(TXN_RETRY), 5,
               "txn_test_no_fallback: a poisoned batch retries all 5, the 4 innocent too");
        ok(st == TXN_DONE && !tx.fell_back && tx.batch_calls == 1 && db.handler_calls[0] == 0 &&
               db.handler_calls[2] == 0 && db.eff_committed[0] == 0 && db.seen[S_COMMIT] == 0 &&
               invariants(st, "no fallback"),
           "txn_test_no_fallback: no message runs alone through handle(), nothing committed");
        is_str(
            msgs[0].reason, "batch handler failed: test batch failure",
            "txn_test_no_fallback: an innocent message carries the batch's failure as its reason");
    }

    setup(3, NULL);
    tx.record = false;
    tx.bulk = tx.batch = true;
    st = txn_run(&tx);
    ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 3 && tx.batch_calls == 1 &&
           db.seen[S_BULK] == 0 && db.eff_committed[2] == 1,
       "dedup none: the batch handler runs without any record statement");

    /* The error matrix: each error at each step, for every position of the batch, with
     * innodb_rollback_on_timeout off and on, checked and as an XA branch; then the same for a
     * batch of one message (in a branch: no savepoint). */
    int matrix_bad = 0, matrix_runs = 0;
    /* per message, set-based, with a batch handler, set-based looking first; 4 and 5: one
     * message that succeeds, one that fails */
    for (int xa = 0; xa <= 1; xa++)
        for (int bulk = 0; bulk <= 5; bulk++)
            for (int on = 0; on <= 1; on++)
                for (int s = S_SAVEPOINT; s < S_N; s++)
                    for (size_t e = 0; e < sizeof(errs) / sizeof(errs[0]); e++)
                        for (int nth = 1; nth <= 3; nth++)
                            for (int times = 1; times <= 2; times++) {
                                if ((s == S_RECORD || s == S_BULK) && errs[e] == 1062)
                                    continue; /* a real duplicate, tested above */
                                if (s == S_ROLLBACK || (!bulk && s >= S_BULK))
                                    continue; /* not a step of that path */
                                if (bulk >= 4 && s >= S_BULK)
                                    continue; /* one message goes message by message */
                                int beh[3] = {H_OK, H_RETRY, H_OK};
                                int lone_beh[1] = {bulk == 5 ? H_RETRY : H_OK};
                                int watched = bulk >= 4 ? 0 : 1; /* the message that retries */
                                if (bulk >= 4)
                                    setup(1, lone_beh);
                                else
                                    setup(3, beh);
                                if (xa) {
                                    tx.ops = &f_ops_xa;
                                    db.xa = true;
                                }
                                tx.bulk = bulk > 0 && bulk < 4;
                                tx.batch = bulk == 2;
                                tx.look_first = bulk == 3;
                                db.rollback_on_timeout = on;
                                fault(s, nth, errs[e], times);
                                st = txn_run(&tx);
                                snprintf(
                                    what, sizeof(what),
                                    "%u at %s #%d x%d, rollback_on_timeout=%d, set-based %d, xa %d",
                                    (unsigned)errs[e], step_names[s], nth, times, on, bulk, xa);
                                matrix_runs++;
                                if (!invariants(st, what)) {
                                    matrix_bad++;
                                    continue;
                                }
                                /* A connection error is fatal; a lock wait or a deadlock never is
                                 * (COMMIT does not wait for locks); 1062 and 1305 where the server
                                 * never sends them are unknown errors: fatal is the safe answer. */
                                bool hit = db.seen[s] >= nth;
                                bool conn = errs[e] >= 2000 && hit;
                                bool lock = (errs[e] == 1213 || (errs[e] == 1205 && s != S_COMMIT));
                                if ((conn && st != TXN_FATAL) || (lock && st == TXN_FATAL)) {
                                    printf("# %s: status %d\n", what, st);
                                    matrix_bad++;
                                }
                                if (st == TXN_DONE && bulk != 4 &&
                                    msgs[watched].state != TXN_RETRY) {
                                    printf("# %s: the retrying message ended in state %d\n", what,
                                           msgs[watched].state);
                                    matrix_bad++;
                                }
                            }
    ok(matrix_bad == 0, "error matrix: %d runs, every invariant holds (%d broken)", matrix_runs,
       matrix_bad);

    /* Ordered queue: m0 (key 1) retries, so m1 (key 1) waits and never runs; m2 (key 2) goes
     * on; the block and the waiter are committed with the batch. */
    static const int ord_beh[] = {H_RETRY, H_OK, H_OK};
    setup(3, ord_beh);
    keys[0] = keys[1] = 1;
    keys[2] = 2;
    tx.ops = &f_ops_ordered;
    tx.bulk = true; /* ignored: an ordered queue goes message by message */
    st = txn_run(&tx);
    ok(st == TXN_DONE && msgs[0].state == TXN_RETRY && msgs[1].state == TXN_WAIT &&
           msgs[2].state == TXN_COMMITTED && db.handler_calls[1] == 0 && blk_head[1] == 0 &&
           n_waiters == 1 && waiters[0] == 1 && txn_route(&msgs[1], 3, true) == TXN_ROUTE_DELAY &&
           invariants(st, "ordered"),
       "ordered: a retry makes the later message of its key wait (blocked on m0, m1 waiting), "
       "another key goes on");
    /* The same with the COMMIT lost to a deadlock once: the redone pass writes the block again
     * before m1 looks at its key. */
    setup(3, ord_beh);
    keys[0] = keys[1] = 1;
    keys[2] = 2;
    tx.ops = &f_ops_ordered;
    fault(S_COMMIT, 1, 1213, 1);
    st = txn_run(&tx);
    ok(st == TXN_DONE && tx.redos == 1 && msgs[1].state == TXN_WAIT && db.handler_calls[1] == 0 &&
           blk_head[1] == 0 && n_waiters == 1 && msgs[2].state == TXN_COMMITTED &&
           invariants(st, "ordered, redone"),
       "ordered: after a lost COMMIT the redone pass blocks the key before its next message runs");
    /* Only failed and waiting messages: the key rows are still committed. */
    static const int ord_one[] = {H_RETRY};
    setup(1, ord_one);
    tx.ops = &f_ops_ordered;
    st = txn_run(&tx);
    ok(st == TXN_DONE && blk_head[0] == 0 && db.seen[S_COMMIT] == 1,
       "ordered: a batch whose only message retries commits its key's block");
    /* Unordered, the same batch: m1 overtakes m0 (what the ordered case prevents). */
    setup(3, ord_beh);
    st = txn_run(&tx);
    ok(st == TXN_DONE && msgs[1].state == TXN_COMMITTED && msgs[0].state == TXN_RETRY,
       "unordered: the later message commits while the earlier one waits for its retry");

    /* Issue 31, finding 10: a handler that writes a table without savepoints (Aria) makes
     * idemd's next SAVEPOINT fail with 1178. Its message is the handler's failure (rejected,
     * the server's text in the reason), the rest of the batch commits, each such handler runs
     * once message by message, and the connection is not blamed (not FATAL). */
    {
        int beh[3] = {H_OK, H_NONTRANS, H_OK};
        setup(3, beh);
        st = txn_run(&tx);
        ok(st == TXN_DONE && msgs[0].state == TXN_COMMITTED && msgs[1].state == TXN_REJECT &&
               msgs[2].state == TXN_COMMITTED && db.handler_calls[1] == 1 &&
               db.eff_nontrans[1] == 1 && tx.blamed == 1 && tx.redos == 0 &&
               invariants(st, "1178 mid-batch"),
           "1178 at the next SAVEPOINT: that message rejected, the others committed, not fatal");
        ok(strstr(msgs[1].reason, "cannot roll back") != NULL &&
               strstr(msgs[1].reason, "error 1178: The storage engine for the table doesn't "
                                      "support SAVEPOINT") != NULL,
           "... its reason names the cause and the server's message: %s", msgs[1].reason);
        int last[3] = {H_OK, H_OK, H_NONTRANS};
        setup(3, last);
        st = txn_run(&tx);
        ok(st == TXN_DONE && count_state(TXN_COMMITTED) == 2 && msgs[2].state == TXN_REJECT &&
               db.handler_calls[2] == 1 && invariants(st, "1178 last"),
           "the last message's handler: caught by the check before COMMIT, rejected");
        int all[3] = {H_NONTRANS, H_NONTRANS, H_NONTRANS};
        setup(3, all);
        st = txn_run(&tx);
        ok(st == TXN_DONE && count_state(TXN_REJECT) == 3 && db.handler_calls[0] == 1 &&
               db.handler_calls[1] == 1 && db.handler_calls[2] == 1 && db.seen[S_COMMIT] == 0 &&
               invariants(st, "1178 all"),
           "every handler: all rejected, each handler run once, nothing committed");
        setup(3, beh);
        tx.bulk = true;
        st = txn_run(&tx);
        ok(st == TXN_DONE && msgs[0].state == TXN_COMMITTED && msgs[1].state == TXN_REJECT &&
               msgs[2].state == TXN_COMMITTED && tx.fell_back && db.handler_calls[1] == 2 &&
               invariants(st, "1178 set-based"),
           "set-based: found by the check, then message by message: rejected, others committed");
    }

    return done();
}
