/* chores.c: work a worker does between batches: retention and reconcile, one runner at a time.
 */
#include "chores.h"
#include "clock.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define CHORES_LEASE_TABLE "idemd_lease"
#define CHORES_SLICE_MS 1000          /* a retention slice stops deleting after this */
#define CHORES_SLICE_GAP_MS 1000      /* and the next slice starts no sooner than this after it */
#define CHORES_BUSY_SLICE_MS 100      /* the same while the worker's last batch had messages */
#define CHORES_BUSY_SHARE 10          /* ... and then a slice takes at most 1/10 of the time */
#define CHORES_PURGE_ROWS 1000        /* rows per DELETE, each committed on its own */
#define CHORES_RETENTION_EVERY_S 3600 /* a retention run is due this long after the last ended */
#define CHORES_RETENTION_LEASE_S 60   /* held across slices: renewed by each slice's claim */
#define CHORES_POLL_MS 10000          /* ask for a lease that was not ours at most this often */
#define CHORES_LEASE_MARGIN_S 30      /* a reconcile lease lasts reconcile_timeout + this */
#define CHORES_SWEEP_S 5              /* the outbox sweeper looks for rows left behind this often */

/* Show the supervisor (readiness, watchdog) that this worker is alive. */
static void chores_progress(chores_t *c)
{
    __atomic_store_n(&c->slot->progress_ms, clock_mono_ms(), __ATOMIC_RELAXED);
}

/* A reconcile run failed (for idemd_reconcile_failures_total). */
static void chores_failed(chores_t *c)
{
    __atomic_add_fetch(&c->slot->c.n_reconcile_failures, 1, __ATOMIC_RELAXED);
}

static void chores_lease_init(chores_t *c, chores_lease_t *l, const char *kind, const char *what)
{
    snprintf(l->name, sizeof(l->name), "%s:%s", kind, what);
    mysql_real_escape_string(c->db->my, l->esc_name, l->name, strlen(l->name));
}

void chores_init(chores_t *c, const conf_t *conf, const conf_queue_t *q, const char *name,
                 worker_slot_t *slot, db_t *db, const idemd_handler_t *h, void *state)
{
    char host[128] = "";

    memset(c, 0, sizeof(*c));
    c->conf = conf;
    c->q = q;
    c->slot = slot;
    c->db = db;
    c->h = h;
    c->state = state;
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "unknown");
    /* pid and start time make it unique on a host, even after the pid is reused. */
    snprintf(c->owner, sizeof(c->owner), "%s:%d:%llu:%s", host, (int)getpid(),
             (unsigned long long)clock_wall_ms(), name);
    mysql_real_escape_string(db->my, c->esc_owner, c->owner, strlen(c->owner));
    /* Retention deletes a consumer's rows; reconcile belongs to the queue's handler. */
    chores_lease_init(c, &c->retention, "retention", q->consumer);
    chores_lease_init(c, &c->reconcile, "reconcile", q->name);
}

void chores_rebind(chores_t *c, db_t *db, void *state)
{
    c->db = db;
    c->state = state;
}

/* Rows the last UPDATE matched (not only those it changed), from mysql_info(). */
static unsigned long long chores_matched(db_t *db)
{
    const char *info = mysql_info(db->my);
    unsigned long long n = 0;
    if (info == NULL || sscanf(info, "Rows matched: %llu", &n) != 1)
        return 0;
    return n;
}

/* Roll back after a failed statement, unless the connection is gone (nothing to roll back). */
static db_status_t chores_abandon(chores_t *c, db_status_t st)
{
    if (st != DB_OK && st != DB_ERR_CONNECTION && db_rollback(c->db) == DB_ERR_CONNECTION)
        return DB_ERR_CONNECTION;
    return st;
}

/* Run one statement and commit it. *matched gets the rows it matched. Errors logged. */
static db_status_t chores_commit_one(chores_t *c, const char *sql, unsigned long long *matched)
{
    db_status_t st = db_exec(c->db, sql);
    if (st != DB_OK && mysql_errno(c->db->my) == ER_NO_SUCH_TABLE)
        log_error("retention and reconcile need the table " CHORES_LEASE_TABLE
                  ": apply sql/004_idemd_lease.sql");
    if (st == DB_OK && matched)
        *matched = chores_matched(c->db);
    if (st == DB_OK)
        st = db_commit(c->db);
    return st == DB_OK ? DB_OK : chores_abandon(c, st);
}

/*
 * Claim (or renew) lease l for lease_s seconds: it must be due, and ours or
 * expired. Committed on its own. 1 when we hold it now, 0 when not (a
 * failed statement too: a Galera certification conflict between two claims
 * surfaces as a deadlock here), -1 when the connection was lost.
 */
static int chores_claim(chores_t *c, chores_lease_t *l, int lease_s)
{
    char sql[2048];
    unsigned long long matched = 0;
    db_status_t st;
    bool was = l->held;

    if (!l->row_ok) {
        snprintf(sql, sizeof(sql), "INSERT IGNORE INTO " CHORES_LEASE_TABLE " (name) VALUES ('%s')",
                 l->esc_name);
        st = chores_commit_one(c, sql, NULL);
        if (st != DB_OK)
            return st == DB_ERR_CONNECTION ? -1 : 0;
        l->row_ok = true;
    }
    snprintf(sql, sizeof(sql),
             "UPDATE " CHORES_LEASE_TABLE " SET owner = '%s', expires_at = NOW(3) + INTERVAL %d "
             "SECOND WHERE name = '%s' AND due_at <= NOW(3) AND (owner = '%s' OR expires_at < "
             "NOW(3))",
             c->esc_owner, lease_s, l->esc_name, c->esc_owner);
    st = chores_commit_one(c, sql, &matched);
    if (st == DB_ERR_CONNECTION)
        return -1;
    l->held = st == DB_OK && matched == 1;
    l->row_ok = l->held; /* not claimed: maybe someone deleted the row; insert it next time */
    if (l->held && !was)
        log_debug("lease %s: taken for %d s as %s", l->name, lease_s, c->owner);
    return l->held ? 1 : 0;
}

/*
 * Let lease l go and make its chore due again in every_s seconds, inside the
 * open transaction (not committed). Only while we still hold it: *matched
 * is 0 when it ran out or someone else has it. Errors logged.
 */
static db_status_t chores_end_lease(chores_t *c, chores_lease_t *l, int every_s,
                                    unsigned long long *matched)
{
    char sql[2048];
    snprintf(sql, sizeof(sql),
             "UPDATE " CHORES_LEASE_TABLE " SET due_at = NOW(3) + INTERVAL %d SECOND, expires_at "
             "= NOW(3) WHERE name = '%s' AND owner = '%s' AND expires_at >= NOW(3)",
             every_s, l->esc_name, c->esc_owner);
    l->held = false;
    db_status_t st = db_exec(c->db, sql);
    *matched = st == DB_OK ? chores_matched(c->db) : 0;
    return st;
}

/* After db_purge failed: -1 if the connection is gone, else 0 (try again later). */
static int chores_purge_failed(chores_t *c)
{
    return db_classify(mysql_errno(c->db->my)) == DB_ERR_CONNECTION ? -1 : 0;
}

/*
 * The gap after a retention slice that took took_ms: CHORES_SLICE_GAP_MS,
 * or while busy long enough that the slice is at most 1/CHORES_BUSY_SHARE
 * of the time (a DELETE of random ids in a large table can take longer than
 * the slice it overshoots).
 */
uint64_t chores_slice_gap_ms(bool busy, uint64_t took_ms)
{
    uint64_t share = busy ? took_ms * (CHORES_BUSY_SHARE - 1) : 0;
    return share > CHORES_SLICE_GAP_MS ? share : CHORES_SLICE_GAP_MS;
}

bool chores_busy(uint64_t busy_us, uint64_t idle_us, uint64_t slice_us)
{
    uint64_t work = busy_us > slice_us ? busy_us - slice_us : 0;
    return work > idle_us;
}

/* Whether the worker was busy since the last slice (chores_busy), from its slot's time; the
 * marks move to now. */
static bool chores_worker_busy(chores_t *c)
{
    uint64_t b = __atomic_load_n(&c->slot->busy_us, __ATOMIC_RELAXED);
    uint64_t i = __atomic_load_n(&c->slot->idle_us, __ATOMIC_RELAXED);
    bool busy = chores_busy(b - c->mark_busy_us, i - c->mark_idle_us, c->last_slice_us);
    c->mark_busy_us = b;
    c->mark_idle_us = i;
    return busy;
}

/*
 * One slice of retention when it is due and the lease is ours: delete the
 * consumer's records, then its crash counts, older than
 * record_retention_days, CHORES_PURGE_ROWS rows per committed DELETE, for
 * at most CHORES_SLICE_MS (CHORES_BUSY_SLICE_MS while busy: the worker's
 * last batch had messages, so the deletes take their time from the queue's).
 * A run that is not finished continues in a later slice (the lease is
 * renewed by each slice's claim); a finished one makes the next run due in
 * an hour. 0, or -1 when the connection was lost.
 */
static int chores_retention(chores_t *c, uint64_t now)
{
    chores_lease_t *l = &c->retention;
    int days = c->q->record_retention_days;
    unsigned long long matched = 0;
    long long slice = 0;

    if (days <= 0 || now < l->next_ms)
        return 0;
    int rc = chores_claim(c, l, CHORES_RETENTION_LEASE_S);
    if (rc <= 0) {
        l->next_ms = now + CHORES_POLL_MS;
        c->run_open = false; /* someone else runs (or finished) it */
        return rc;
    }
    if (!c->run_open) {
        c->run_open = true;
        c->run_phase = c->q->dedup == CONF_DEDUP_TABLE ? 0 : 1;
        c->run_slices = 0;
        c->run_rows = 0;
        c->run_start_ms = now;
        (void)chores_worker_busy(c); /* the marks: the first slice is taken as idle */
    }
    c->run_slices++;
    bool busy = c->run_slices > 1 && chores_worker_busy(c);
    uint64_t t0 = clock_mono_ms(), took = 0;
    uint64_t limit = busy ? CHORES_BUSY_SLICE_MS : CHORES_SLICE_MS;
    while (c->run_phase < 2 && took < limit) {
        long long n = c->run_phase == 0 ? db_purge(c->db, c->conf->database.record_table,
                                                   "create_time", days, CHORES_PURGE_ROWS)
                                        : db_purge(c->db, DB_ATTEMPT_TABLE, "updated_at", days,
                                                   CHORES_PURGE_ROWS);
        chores_progress(c);
        took = clock_mono_ms() - t0;
        if (n < 0) {
            log_warn("retention: stopped after %lld rows (%lld in this run): trying again in %d s",
                     slice, c->run_rows, CHORES_POLL_MS / 1000);
            l->next_ms = now + CHORES_POLL_MS;
            return chores_purge_failed(c);
        }
        slice += n;
        c->run_rows += n;
        __atomic_add_fetch(&c->slot->c.n_retention_rows, (uint64_t)n, __ATOMIC_RELAXED);
        if (n < CHORES_PURGE_ROWS)
            c->run_phase++;
    }
    c->last_slice_us = took * 1000;
    if (c->run_phase < 2) {
        uint64_t gap = chores_slice_gap_ms(busy, took);
        log_info("retention: deleted %lld rows in %llu ms (%lld in this run so far): continuing "
                 "in %llu ms%s",
                 slice, (unsigned long long)took, c->run_rows, (unsigned long long)gap,
                 busy ? " (busy)" : "");
        l->next_ms = clock_mono_ms() + gap;
        return 0;
    }
    c->run_open = false;
    l->next_ms = now + CHORES_POLL_MS;
    db_status_t st = chores_end_lease(c, l, CHORES_RETENTION_EVERY_S, &matched);
    if (st == DB_OK)
        st = db_commit(c->db);
    if (st != DB_OK && chores_abandon(c, st) == DB_ERR_CONNECTION)
        return -1;
    log_info("retention: deleted %lld rows older than %d days in %d slice(s) over %llu ms (last "
             "slice %llu ms)%s",
             c->run_rows, days, c->run_slices,
             (unsigned long long)(clock_mono_ms() - c->run_start_ms), (unsigned long long)took,
             matched == 1 ? "" : "; the lease ran out meanwhile");
    return 0;
}

/*
 * After the reconcile hook returned hr: its transaction must still be open
 * and whole. A refused end fails the run (err says why); an end the server
 * could not refuse (Galera) is logged as the error it is, and fails it too.
 */
static int chores_boundary(chores_t *c, int hr, char *err, size_t errlen)
{
    unsigned e = mysql_errno(c->db->my);
    if (db_classify(e) == DB_ERR_CONNECTION)
        return hr;
    switch (db_boundary(c->db, e)) {
    case DB_BOUNDARY_REFUSED:
        snprintf(err, errlen,
                 "the reconcile hook tried to end idemd's transaction: the server refused it "
                 "(error %u: %.200s); nothing of the run was kept",
                 e, mysql_error(c->db->my));
        return -1;
    case DB_BOUNDARY_ENDED:
        log_error("handler %s: the reconcile hook ended idemd's transaction (COMMIT, ROLLBACK or "
                  "DDL): what it did before is committed without the lease check. Fix the hook "
                  "(docs/plugins.md)",
                  c->h->name);
        snprintf(err, errlen, "the reconcile hook ended idemd's transaction");
        return -1;
    default:
        return hr;
    }
}

/*
 * The handler's reconcile hook, when it is due and the lease is ours, in
 * its own transaction under reconcile_timeout (SIGALRM, whose default action
 * kills the worker; the supervisor names the cause from slot->reconciling).
 * The lease is let go in the same transaction, and only while it is still
 * ours: a run whose lease ran out is rolled back, never committed beside
 * another's. A failed run waits for its next turn too. 0, or -1 when the
 * connection was lost.
 */
static int chores_reconcile(chores_t *c, uint64_t now)
{
    chores_lease_t *l = &c->reconcile;
    /* The supervisor's value: a reload changes it without a restart. */
    int every = __atomic_load_n(&c->slot->reconcile_interval, __ATOMIC_RELAXED);
    unsigned long long matched = 0;
    char err[512] = "";
    db_status_t st;

    if (!c->h->reconcile || every <= 0 || now < l->next_ms)
        return 0;
    l->next_ms =
        now + (uint64_t)(every < CHORES_POLL_MS / 1000 ? every : CHORES_POLL_MS / 1000) * 1000;
    int rc = chores_claim(c, l, c->conf->reconcile_timeout + CHORES_LEASE_MARGIN_S);
    if (rc <= 0)
        return rc;
    uint64_t t0 = clock_mono_ms();
    /* The run's start, then the flag: the supervisor counts the worker alive until the
     * timeout (release: it reads the flag, then the time). */
    chores_progress(c);
    __atomic_store_n(&c->slot->reconciling, 1, __ATOMIC_RELEASE);
    /* Its own transaction, kept as a batch's is: the server refuses what would end it. */
    if ((st = db_begin(c->db)) != DB_OK) {
        __atomic_store_n(&c->slot->reconciling, 0, __ATOMIC_RELEASE);
        chores_failed(c);
        return chores_abandon(c, st) == DB_ERR_CONNECTION ? -1 : 0;
    }
    alarm((unsigned)c->conf->reconcile_timeout);
    int hr = c->h->reconcile(c->state, c->db->my, err, sizeof(err));
    alarm(0);
    hr = chores_boundary(c, hr, err, sizeof(err));
    chores_progress(c);
    __atomic_store_n(&c->slot->reconciling, 0, __ATOMIC_RELEASE);
    __atomic_add_fetch(&c->slot->c.n_reconcile_runs, 1, __ATOMIC_RELAXED);
    uint64_t took = clock_mono_ms() - t0;
    err[sizeof(err) - 1] = '\0';
    if (hr != 0) {
        chores_failed(c);
        log_warn("handler %s: reconcile failed after %llu ms: %s", c->h->name,
                 (unsigned long long)took, err[0] ? err : "(no reason)");
        /* Its next turn comes after the interval too, not at the next poll. */
        st = db_rollback(c->db);
        if (st == DB_OK)
            st = chores_end_lease(c, l, every, &matched);
        if (st == DB_OK)
            st = db_commit(c->db);
        return chores_abandon(c, st) == DB_ERR_CONNECTION ? -1 : 0;
    }
    st = chores_end_lease(c, l, every, &matched);
    if (st == DB_OK && matched != 1) {
        log_warn("handler %s: reconcile took %llu ms and its lease %s ran out: rolled back",
                 c->h->name, (unsigned long long)took, l->name);
        st = DB_ERR_OTHER;
    } else if (st == DB_OK && (st = db_commit(c->db)) == DB_OK) {
        log_info("reconcile: handler %s done in %llu ms", c->h->name, (unsigned long long)took);
        return 0;
    }
    chores_failed(c);
    return chores_abandon(c, st) == DB_ERR_CONNECTION ? -1 : 0;
}

void chores_set_sweep(chores_t *c, int (*peek)(void *arg), int (*fn)(void *arg), void *arg)
{
    chores_lease_init(c, &c->sweep, "outbox", c->q->consumer);
    c->sweep_peek = peek;
    c->sweep_fn = fn;
    c->sweep_arg = arg;
}

/* The outbox sweeper's turn: every CHORES_SWEEP_S, one runner across instances. */
static int chores_sweep(chores_t *c, uint64_t now)
{
    chores_lease_t *l = &c->sweep;
    unsigned long long matched = 0;

    if (c->sweep_fn == NULL || now < l->next_ms)
        return 0;
    l->next_ms = now + CHORES_SWEEP_S * 1000;
    /* Nothing left behind: no lease to take (a claim and a release are two commits, each a
     * redo-log flush the batches behind it wait for; docs/performance.md). */
    int rc = c->sweep_peek ? c->sweep_peek(c->sweep_arg) : 1;
    if (rc <= 0)
        return rc;
    rc = chores_claim(c, l, CHORES_SWEEP_S + CHORES_LEASE_MARGIN_S);
    if (rc <= 0)
        return rc;
    if (c->sweep_fn(c->sweep_arg) != 0)
        return -1;
    chores_progress(c);
    db_status_t st = chores_end_lease(c, l, CHORES_SWEEP_S, &matched);
    if (st == DB_OK)
        st = db_commit(c->db);
    return chores_abandon(c, st) == DB_ERR_CONNECTION ? -1 : 0;
}

int chores_tick(chores_t *c)
{
    uint64_t now = clock_mono_ms();
    if (chores_retention(c, now) != 0)
        return -1;
    if (chores_sweep(c, now) != 0)
        return -1;
    return chores_reconcile(c, now);
}
