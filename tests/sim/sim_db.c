/* sim_db.c: the simulated database: committed tables, the open transaction as a list of writes,
 * and the server's answer to each fault (tests/unit/test_txn.c's fake, grown).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

sim_db_t sim_db;

/* Kinds of write in the open transaction. */
enum { W_RECORD, W_EFFECT, W_CLEAR, W_ROW, W_ORDER };

/* What a statement may fail with. */
enum { F_CONN = 1, F_DEADLOCK = 2, F_LOCKWAIT = 4 };

static void db_reset_tx(void)
{
    sim_db.nw = 0;
    sim_db.nsp = 0;
}

void sim_db_reset(void)
{
    memset(&sim_db, 0, sizeof(sim_db));
    for (int k = 0; k < SIM_KEYS; k++)
        sim_db.order.head[k] = -1;
}

void sim_db_disconnect(void)
{
    db_reset_tx(); /* the server rolls back what the connection had open */
    sim_db.dead = false;
    sim_db.ro_err = 0;
}

int sim_id_of(const txn_msg_t *m)
{
    return atoi(m->id + 1); /* ids are "m<N>" */
}

/*
 * A Group Replication primary: half of the lost connections are its errors
 * instead (a switchover or failover under the session), from sim.grng. Each
 * leaves the session unusable for writes, and nothing of the transaction
 * commits: 1290 (demoted: super_read_only), 3100 (a hook on a member that
 * leaves), 3781..3783 (a hold on the new primary given up), 3796 (not
 * ONLINE), 4031 (disconnected for inactivity).
 */
static const unsigned db_gr_lost[] = {1290, 3100, 3781, 3782, 3783, 3796, 4031};

static unsigned db_gr_error(unsigned lost)
{
    const unsigned *gr = db_gr_lost;
    if (sim_rng_below(&sim.grng, 2) == 0)
        return lost;
    return gr[sim_rng_below(&sim.grng, sizeof(db_gr_lost) / sizeof(db_gr_lost[0]))];
}

/* Whether the statement what writes (or commits): not a read, not a savepoint, not a
 * rollback. */
static bool db_writes(const char *what)
{
    return strncmp(what, "SAVEPOINT", 9) != 0 && strncmp(what, "RELEASE", 7) != 0 &&
           strncmp(what, "ROLLBACK", 8) != 0 && strstr(what, "SELECT") == NULL;
}

bool sim_db_session_lost(unsigned e)
{
    if (e == 2006 || e == 2013)
        return true;
    for (size_t k = 0; k < sizeof(db_gr_lost) / sizeof(db_gr_lost[0]); k++)
        if (e == db_gr_lost[k])
            return true;
    return false;
}

/*
 * Before each statement: the worker may die here; a connection already
 * lost fails at once; then maybe one of the errors this statement can get
 * (kinds), done to the transaction as the server does it: 1213 rolls back
 * all of it, 1205 the statement (or all of it with
 * innodb_rollback_on_timeout), 2006/2013 all of it and the connection; a
 * Group Replication error leaves the session on a server that will commit
 * nothing of it (ro_err).
 */
static unsigned db_fault(const char *what, int kinds)
{
    static const unsigned conn[] = {2006, 2013};
    unsigned e = 0;

    if (sim_db.dead)
        return 2006;
    sim_maybe_die(what);
    if (sim_db.ro_err && db_writes(what)) {
        unsigned e = sim_db.ro_err;
        if (strcmp(what, "COMMIT") == 0)
            db_reset_tx(); /* a COMMIT with writes fails, and the transaction is gone */
        sim_log("db: %s fails with %u again", what, e);
        return e;
    }
    if (!sim_fault(sim.o.pm_db_fault))
        return 0;
    unsigned pick = sim_rng_below(&sim.rng, 3);
    if (pick == 0 && (kinds & F_DEADLOCK))
        e = 1213;
    else if (pick == 1 && (kinds & F_LOCKWAIT))
        e = 1205;
    else if (kinds & F_CONN)
        e = conn[sim_rng_below(&sim.rng, 2)];
    else
        return 0;
    if (e >= 2000 && sim.o.gr)
        e = db_gr_error(e);
    sim_log("db: %s fails with %u", what, e);
    if (e == 1213 || (e == 1205 && sim.o.rollback_on_timeout))
        db_reset_tx();
    if (e == 2006 || e == 2013 || e == 4031) {
        db_reset_tx();
        sim_db.dead = true;
    } else if (e != 1213 && e != 1205) {
        /* The session lives on, but nothing it writes will commit. */
        sim_db.ro_err = e;
    }
    return e;
}

static int db_sp_find(const char *name)
{
    for (int i = 0; i < sim_db.nsp; i++)
        if (strcmp(sim_db.sp[i].name, name) == 0)
            return i;
    return -1;
}

static void db_apply(void)
{
    for (int i = 0; i < sim_db.nw; i++) {
        int id = sim_db.w[i].id;
        switch (sim_db.w[i].kind) {
        case W_RECORD:
            sim_db.rec[id]++;
            break;
        case W_EFFECT:
            sim_db.eff[id]++;
            /* The ordering invariant at the moment effects commit: no later message of the key
             * has committed before (one given up and dead-lettered first is out of the order). */
            for (int j = id + 1; sim.o.ordered && j < sim.o.n_msgs; j++)
                if (sim.truth[j].key == sim.truth[id].key && sim_db.eff[j] > 0 &&
                    !sim.truth[id].dl_reason[0])
                    sim_violation("m%d of key k%d committed after m%d, published after it", id,
                                  sim.truth[id].key, j);
            break;
        case W_ORDER:
            sim_db.order = sim_db.osnap[sim_db.w[i].row];
            break;
        case W_CLEAR:
            sim_db.starts[id] = sim_db.crashes[id] = 0;
            break;
        case W_ROW:
            /* dedup = "none": a second run of the message writes its row again, so one more
             * send of it is expected (the simulated table keeps one row per message and row). */
            if (sim.o.dedup_none && sim.truth[id].row_committed[sim_db.w[i].row])
                sim.truth[id].row_may_resend[sim_db.w[i].row] = true;
            sim_db.row[id][sim_db.w[i].row] = true;
            sim_db.row_attempts[id][sim_db.w[i].row] = 0;
            sim_db.row_next_ms[id][sim_db.w[i].row] = 0;
            sim_db.row_failed_s[id][sim_db.w[i].row] = 0;
            sim.truth[id].row_committed[sim_db.w[i].row] = true;
            break;
        }
    }
    db_reset_tx();
}

static void db_write(int kind, int id, int row)
{
    if (sim_db.nw >= (int)(sizeof(sim_db.w) / sizeof(sim_db.w[0]))) {
        sim_violation("memory: the open transaction passed %d writes", sim_db.nw);
        return;
    }
    sim_db.w[sim_db.nw].kind = kind;
    sim_db.w[sim_db.nw].id = id;
    sim_db.w[sim_db.nw++].row = row;
}

unsigned sim_db_exec(void *ctx, const char *sql)
{
    char name[8];
    unsigned e;
    int i;
    (void)ctx;

    if (sscanf(sql, "SAVEPOINT %7s", name) == 1) {
        if ((e = db_fault(sql, F_CONN)) != 0)
            return e;
        if ((i = db_sp_find(name)) < 0) {
            if (sim_db.nsp >= (int)(sizeof(sim_db.sp) / sizeof(sim_db.sp[0]))) {
                sim_violation("memory: more than %d savepoints", sim_db.nsp);
                return 1305;
            }
            i = sim_db.nsp++;
            snprintf(sim_db.sp[i].name, sizeof(sim_db.sp[i].name), "%s", name);
        }
        sim_db.sp[i].at = sim_db.nw;
        return 0;
    }
    if (sscanf(sql, "ROLLBACK TO SAVEPOINT %7s", name) == 1) {
        if ((e = db_fault(sql, F_CONN)) != 0)
            return e;
        if ((i = db_sp_find(name)) < 0)
            return 1305;
        sim_db.nw = sim_db.sp[i].at;
        int k = 0; /* later savepoints go */
        for (int j = 0; j < sim_db.nsp; j++)
            if (sim_db.sp[j].at <= sim_db.nw)
                sim_db.sp[k++] = sim_db.sp[j];
        sim_db.nsp = k;
        return 0;
    }
    if (sscanf(sql, "RELEASE SAVEPOINT %7s", name) == 1) {
        if ((e = db_fault(sql, F_CONN)) != 0)
            return e;
        if ((i = db_sp_find(name)) < 0)
            return 1305;
        sim_db.sp[i] = sim_db.sp[--sim_db.nsp];
        return 0;
    }
    if (strcmp(sql, "COMMIT") == 0) {
        /* A Group Replication primary's certification conflict is 3101: all rolled back. */
        if ((e = db_fault(sql, F_CONN | F_DEADLOCK)) != 0 && e == 1213 && sim.o.gr) {
            sim_log("db: (a certification conflict: 3101)");
            return 3101;
        }
        if (e != 0)
            return e;
        if (sim_fault(sim.o.pm_commit_lost)) {
            bool applied = sim_rng_below(&sim.rng, 2);
            /* On a primary leaving the group the unknown outcome may be 3100 (its hook). */
            e = sim.o.gr && sim_rng_below(&sim.grng, 2) ? 3100 : 2013;
            sim_log("db: COMMIT reply lost (%s), %u", applied ? "applied" : "not applied", e);
            if (applied)
                db_apply();
            db_reset_tx();
            sim_db.dead = true;
            return e;
        }
        db_apply();
        return 0;
    }
    if (strcmp(sql, "ROLLBACK") == 0) {
        e = db_fault(sql, F_CONN);
        db_reset_tx();
        return e;
    }
    fprintf(stderr, "sim: unexpected SQL %s\n", sql);
    abort();
}

/* Whether id has a record, committed or in the open transaction. */
static bool db_has_record(int id)
{
    if (sim_db.rec[id])
        return true;
    for (int i = 0; i < sim_db.nw; i++)
        if (sim_db.w[i].kind == W_RECORD && sim_db.w[i].id == id)
            return true;
    return false;
}

unsigned sim_db_record(void *ctx, const txn_msg_t *m)
{
    unsigned e;
    (void)ctx;
    /* A key another transaction holds uncommitted waits (1205); a committed one, or one this
     * transaction wrote (a copy earlier in the batch), answers 1062 at once: InnoDB never makes
     * a transaction wait on its own lock. */
    if ((e = db_fault("record INSERT",
                      F_CONN | F_DEADLOCK | (db_has_record(sim_id_of(m)) ? 0 : F_LOCKWAIT))) != 0)
        return e;
    if (db_has_record(sim_id_of(m)))
        return 1062;
    db_write(W_RECORD, sim_id_of(m), 0);
    return 0;
}

unsigned sim_db_clear(void *ctx, const txn_msg_t *m)
{
    unsigned e;
    (void)ctx;
    if ((e = db_fault("attempts DELETE", F_CONN | F_DEADLOCK)) != 0)
        return e;
    db_write(W_CLEAR, sim_id_of(m), 0);
    return 0;
}

unsigned sim_db_record_many(void *ctx, txn_msg_t *const *ms, int k)
{
    unsigned e;
    int committed = 0;
    (void)ctx;
    for (int j = 0; j < k; j++)
        committed += db_has_record(sim_id_of(ms[j])); /* ours or committed: no wait on it */
    if ((e = db_fault("multi-row record INSERT",
                      F_CONN | F_DEADLOCK | (committed == k ? 0 : F_LOCKWAIT))) != 0)
        return e;
    for (int j = 0; j < k; j++)
        if (db_has_record(sim_id_of(ms[j])))
            return 1062; /* the whole statement is rolled back */
    for (int j = 0; j < k; j++)
        db_write(W_RECORD, sim_id_of(ms[j]), 0);
    return 0;
}

unsigned sim_db_find_records(void *ctx, txn_msg_t *const *ms, int k, bool *found)
{
    unsigned e;
    (void)ctx;
    if ((e = db_fault("record SELECT", F_CONN)) != 0)
        return e;
    for (int j = 0; j < k; j++)
        found[j] = sim_db.rec[sim_id_of(ms[j])] > 0;
    return 0;
}

unsigned sim_db_stmt(int id, int row, uint64_t *waited_ms)
{
    unsigned e;
    *waited_ms = 0;
    if ((e = db_fault(row < 0 ? "handler UPDATE" : "handler outbox INSERT",
                      F_CONN | F_DEADLOCK | F_LOCKWAIT)) != 0)
        return e;
    if (row < 0 && sim_db.lock_until_ms > sim.now_ms) {
        /* Another session holds the table (LOCK TABLES, FLUSH TABLES WITH READ LOCK) or the
         * row: the statement waits. A row lock wait ends in 1205 after innodb_lock_wait_timeout;
         * a table lock wait lasts until the unlock (lock_wait_timeout is a year). */
        uint64_t left = sim_db.lock_until_ms - sim.now_ms;
        if (sim_db.lock_is_row && left > SIM_LOCK_WAIT_MS) {
            *waited_ms = SIM_LOCK_WAIT_MS;
            sim_log("db: handler UPDATE of m%d waits %d ms for a row lock: 1205", id,
                    SIM_LOCK_WAIT_MS);
            if (sim.o.rollback_on_timeout)
                db_reset_tx();
            return 1205;
        }
        *waited_ms = left;
        sim_log("db: handler UPDATE of m%d waits %llu ms for a %s lock", id,
                (unsigned long long)left, sim_db.lock_is_row ? "row" : "table");
    }
    db_write(row < 0 ? W_EFFECT : W_ROW, id, row < 0 ? 0 : row);
    return 0;
}

unsigned sim_db_find(int id, bool *found)
{
    unsigned e;
    if ((e = db_fault("guard record SELECT", F_CONN)) != 0)
        return e;
    *found = sim_db.rec[id] > 0;
    return 0;
}

/* The guard's rows of id as worker sim.cur's instance sees them: shared by every instance of
 * the consumer, or (--bug guard_per_instance) instance 1's own. */
static long long *db_starts(int id)
{
    return sim.bug.guard_per_instance && sim_instance(sim.cur) == 1 ? &sim_db.starts1[id]
                                                                    : &sim_db.starts[id];
}

static long long *db_crashes(int id)
{
    return sim.bug.guard_per_instance && sim_instance(sim.cur) == 1 ? &sim_db.crashes1[id]
                                                                    : &sim_db.crashes[id];
}

long long sim_db_bump(int id, long long *crashes)
{
    if (db_fault("guard attempts bump", F_CONN) != 0)
        return -1;
    *crashes = *db_crashes(id);
    sim_log("db: guard: m%d start %lld, %lld crashes counted", id, *db_starts(id) + 1, *crashes);
    return ++*db_starts(id);
}

long long sim_db_crash(int id, bool add_start)
{
    if (db_fault("guard crash count", F_CONN) != 0)
        return -1;
    if (add_start)
        ++*db_starts(id);
    sim_log("db: guard: m%d crash %lld counted", id, *db_crashes(id) + 1);
    return ++*db_crashes(id);
}

unsigned sim_db_unstart(int id)
{
    unsigned e;
    if ((e = db_fault("guard attempts unstart", F_CONN)) != 0)
        return e;
    if (*db_starts(id) > 0)
        --*db_starts(id);
    return 0;
}

unsigned sim_db_row_delete(int id, int row)
{
    unsigned e;
    if ((e = db_fault("outbox DELETE", F_CONN | F_DEADLOCK)) != 0)
        return e;
    sim_db.row[id][row] = false;
    return 0;
}

unsigned sim_db_outbox_fault(const char *what, bool deadlock)
{
    return db_fault(what, F_CONN | (deadlock ? F_DEADLOCK : 0));
}

/* ---------- an ordered queue's key tables (order.c's statements, on the tables above) ----------
 */

/* "db_hex_literal" and "db_commit": db.c's calls in order.c (linked for order_key_of), never
 * reached here: the key rows go through sim_order_db_ops. */
char *db_hex_literal(char *s, const void *b, size_t len)
{
    (void)b;
    (void)len;
    return s;
}

db_status_t db_commit(db_t *db)
{
    (void)db;
    return DB_OK;
}

/* The key tables as the open transaction sees them: its last version, or the committed one. */
static struct sim_order_tab *order_view(int *last)
{
    *last = -1;
    for (int i = sim_db.nw - 1; i >= 0; i--)
        if (sim_db.w[i].kind == W_ORDER) {
            *last = sim_db.w[i].row;
            return &sim_db.osnap[*last];
        }
    return &sim_db.order;
}

/* A new version of the key tables for the open transaction, to write into; NULL when full. */
static struct sim_order_tab *order_write(void)
{
    int last;
    struct sim_order_tab *cur = order_view(&last);
    if (last + 1 >= SIM_ORDER_SNAPS) {
        sim_violation("memory: the open transaction wrote the key tables %d times", last + 1);
        return NULL;
    }
    sim_db.osnap[last + 1] = *cur;
    db_write(W_ORDER, 0, last + 1);
    return &sim_db.osnap[last + 1];
}

/* Every key statement locks the key's block row first: it may die, lose the connection or be
 * chosen as a deadlock victim. */
static unsigned order_fault(const char *what)
{
    return db_fault(what, F_CONN | F_DEADLOCK);
}

static int order_key_index(const char *key, size_t klen)
{
    (void)klen;
    return atoi(key + 1); /* keys are "k<N>" */
}

static unsigned o_blocked(void *ctx, const char *const *keys, const size_t *lens, int n,
                          bool *blocked)
{
    int last;
    unsigned e;
    (void)ctx;
    if ((e = order_fault("order SELECT blocked keys FOR UPDATE")) != 0)
        return e;
    const struct sim_order_tab *t = order_view(&last);
    for (int j = 0; j < n; j++)
        blocked[j] = t->head[order_key_index(keys[j], lens[j])] >= 0;
    return 0;
}

static unsigned o_check(void *ctx, const char *key, size_t klen, const char *id, size_t idlen,
                        order_place_t *place)
{
    int last;
    unsigned e;
    (void)ctx;
    (void)idlen;
    if ((e = order_fault("order SELECT head FOR UPDATE")) != 0)
        return e;
    const struct sim_order_tab *t = order_view(&last);
    int head = t->head[order_key_index(key, klen)];
    *place = head < 0 ? ORDER_FREE : head == atoi(id + 1) ? ORDER_HEAD : ORDER_WAIT;
    return 0;
}

/* INSERT IGNORE of the waiter: a message keeps its first place. */
static void order_tab_wait(struct sim_order_tab *t, int id)
{
    if (t->wseq[id] == 0)
        t->wseq[id] = ++t->next_seq;
}

static unsigned o_wait(void *ctx, const char *key, size_t klen, const char *id, size_t idlen)
{
    unsigned e;
    struct sim_order_tab *t;
    (void)ctx;
    (void)key;
    (void)klen;
    (void)idlen;
    if ((e = order_fault("order INSERT waiter")) != 0 || (t = order_write()) == NULL)
        return e ? e : 2013;
    order_tab_wait(t, atoi(id + 1));
    sim_log("db: order: %.*s waits behind k%d's head m%d", (int)idlen, id, atoi(key + 1),
            t->head[order_key_index(key, klen)]);
    return 0;
}

static unsigned o_block(void *ctx, const char *key, size_t klen, const char *id, size_t idlen)
{
    unsigned e;
    struct sim_order_tab *t;
    int k = order_key_index(key, klen), m = atoi(id + 1);
    (void)ctx;
    (void)idlen;
    if ((e = order_fault("order block key")) != 0 || (t = order_write()) == NULL)
        return e ? e : 2013;
    if (t->head[k] < 0 || t->head[k] == m) {
        t->head[k] = m;
        t->held[k] = false;
        sim_log("db: order: k%d blocked on m%d", k, m);
    } else {
        order_tab_wait(t, m);
    }
    return 0;
}

static unsigned o_done(void *ctx, const char *key, size_t klen, const char *id, size_t idlen,
                       bool hold)
{
    unsigned e;
    struct sim_order_tab *t;
    int k = order_key_index(key, klen), m = atoi(id + 1);
    (void)ctx;
    (void)idlen;
    if ((e = order_fault("order done")) != 0 || (t = order_write()) == NULL)
        return e ? e : 2013;
    bool found = t->head[k] >= 0, is_head = t->head[k] == m;
    if (hold && (!found || is_head)) {
        t->head[k] = m;
        t->held[k] = true;
    } else if (is_head) {
        /* The first waiter of the key becomes its head; none left: the key is free. */
        int next = -1;
        for (int j = 0; j < sim.o.n_msgs; j++)
            if (t->wseq[j] > 0 && sim.truth[j].key == k && (next < 0 || t->wseq[j] < t->wseq[next]))
                next = j;
        t->head[k] = next;
        t->held[k] = false;
        if (next >= 0)
            t->wseq[next] = 0;
        sim_log("db: order: m%d done: k%d %s m%d", m, k, next >= 0 ? "moves on to" : "is free",
                next);
    } else if (found) {
        t->wseq[m] = 0;
    }
    return 0;
}

const db_order_ops_t sim_order_db_ops = {
    .blocked = o_blocked,
    .check = o_check,
    .wait = o_wait,
    .block = o_block,
    .done = o_done,
};
